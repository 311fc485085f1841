"""A limited queue's slot is freed by every way a job leaves ``active`` (SPEC §8):
``job.transaction()``'s commit, a timeout (even when the handler ignores its
signal), and an abort's release, each exactly once, counted from the rows."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
from psycopg import sql

from portqueue import PortQueue
from portqueue.worker.job import Job
from tests.support.waiting import wait_until
from tests.support.workers import SyncHarness

Db = psycopg.Connection[Any]


def statuses(db: Db, schema: str, queue: str) -> dict[str, int]:
    rows = db.execute(sql.SQL(
        "SELECT status::text, count(*) FROM {} WHERE queue = %s GROUP BY 1").format(
            sql.Identifier(schema, "job")), [queue]).fetchall()
    return {status: int(n) for status, n in rows}


def test_transactions_and_timeouts_free_their_slots_in_a_limited_queue(
    client: PortQueue, harness: SyncHarness, db: Db, schema: str,
) -> None:
    ignore = threading.Event()  # set at the end: the timed-out handlers return

    def handler(job: Job) -> None:
        if job.data == "stuck":
            ignore.wait(20)  # ignores its signal: the timeout frees the slot anyway
            return
        with job.transaction() as conn:
            conn.execute("SELECT 1")

    client.create_queue(queue="slots", handler=handler, concurrency=5, global_concurrency=1,
                        timeout_seconds=1)
    client.add_jobs(queue="slots", jobs=[{"data": "stuck"}] + [{"data": n} for n in range(4)])
    harness.start()
    try:
        wait_until(lambda: statuses(db, schema, "slots") == {"failed": 1, "completed": 4},
                   15, "the stuck job to time out and the others to complete in turn")
    finally:
        ignore.set()
    (overlap,) = db.execute(sql.SQL(
        "SELECT count(*) FROM {0} AS a JOIN {0} AS b ON a.id < b.id "
        "AND a.started_at < b.finished_at AND b.started_at < a.finished_at "
        "WHERE a.queue = 'slots' AND b.queue = 'slots'").format(
            sql.Identifier(schema, "job"))).fetchone() or (0,)
    assert overlap == 0, "two jobs of a queue limited to one ran at once"


def test_an_abort_releases_slots_at_once_and_another_worker_claims_them(
    pg_dsn: str, schema: str, client: PortQueue, harness: SyncHarness, db: Db,
) -> None:
    release = threading.Event()
    client.create_queue(queue="slots", handler=lambda job: release.wait(20), concurrency=4,
                        global_concurrency=2)
    client.add_jobs(queue="slots", jobs=[{"data": n} for n in range(3)])
    harness.start()
    wait_until(lambda: statuses(db, schema, "slots") == {"active": 2, "pending": 1}, 10,
               "two of three running")
    client.stop(abort=True)
    assert statuses(db, schema, "slots") == {"pending": 3}, "released at once, no attempt lost"
    release.set()
    done: list[Any] = []
    with PortQueue(pg_dsn, schema=schema) as other:
        other.create_queue(queue="slots", handler=lambda job: done.append(job.attempt),
                           concurrency=4, global_concurrency=2)
        other.start(maintenance=False, scheduler=False, poll_interval=0.5)
        try:
            wait_until(lambda: statuses(db, schema, "slots") == {"completed": 3}, 10,
                       "the released jobs to run on the other worker")
        finally:
            other.stop()
    assert done == [1, 1, 1], "the release spent no attempt"
