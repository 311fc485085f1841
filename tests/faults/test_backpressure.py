"""Issue 22, backpressure: while a worker's outcome writes are stuck (its pool
connection black-holed), it stops claiming once its backlog of unwritten
outcomes is full, and the heartbeat keeps the leases of the jobs whose
handler returned, so none is rescued and run again, and none fails with
LeaseExpired although its run succeeded. Once the stuck write reaches its
deadline, a new connection writes everything."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg import sql

from portqueue import PortQueue
from portqueue.worker import connections
from portqueue.worker.completer import BACKLOG_PER_SLOT
from tests.faults.harness import count_where
from tests.faults.proxy import Proxy
from tests.support.waiting import wait_until

CONCURRENCY = 2
BACKLOG_CAP = BACKLOG_PER_SLOT * CONCURRENCY
LEASE_SECONDS = 3
# Long enough for every lease to have lapsed twice over if nothing extended
# it, short enough for the test.
WRITE_DEADLINE = 3 * LEASE_SECONDS
JOBS = 30


def _claimed(db: psycopg.Connection[Any], schema: str) -> int:
    row = db.execute(sql.SQL("SELECT count(*) FROM {} WHERE started_at IS NOT NULL").format(
        sql.Identifier(schema, "job"))).fetchone()
    return int(row[0]) if row else 0


def _lapsed_or_failed(db: psycopg.Connection[Any], schema: str) -> int:
    row = db.execute(sql.SQL(
        "SELECT count(*) FROM {} WHERE (status = 'active' AND lease_expires_at <= now()) "
        "OR status = 'failed' OR attempt > 1").format(sql.Identifier(schema, "job"))).fetchone()
    return int(row[0]) if row else 0


def test_stuck_outcomes_stop_claims_and_keep_their_leases(
    proxy: Proxy, pg_dsn: str, db: psycopg.Connection[Any], schema: str, pq: PortQueue,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(connections.STATEMENT_SECONDS, "worker",
                        WRITE_DEADLINE - connections.CLIENT_MARGIN_SECONDS)
    worker = PortQueue(proxy.dsn(pg_dsn), schema=schema, pool_min_size=0, pool_max_size=4)
    ran: list[str] = []
    worker.handler("stuck", concurrency=CONCURRENCY, lease_seconds=LEASE_SECONDS)(
        lambda job: ran.append(job.id))
    worker.start(maintenance=False, scheduler=False, poll_interval=0.2)
    try:
        first = pq.add_job(queue="stuck", data={}).job_id
        assert first
        wait_until(lambda: count_where(db, schema, [first], "completed"), 10, "a first job")
        assert proxy.blackhole("worker") >= 1
        ids = [r.job_id for r in pq.add_jobs(queue="stuck", jobs=[{"data": {}}] * JOBS)
               if r.job_id is not None]
        # Every lease taken now would have lapsed by this time without a heartbeat.
        (start,) = db.execute("SELECT now()").fetchone() or (None,)
        wait_until(lambda: db.execute(
            "SELECT now() > %s + make_interval(secs => %s)",
            [start, LEASE_SECONDS * 2]).fetchone() == (True,), 30, "two lease periods")
        claimed = _claimed(db, schema) - 1
        assert claimed <= BACKLOG_CAP + 2 * CONCURRENCY, (
            f"{claimed} jobs claimed while no outcome could be written")
        assert _lapsed_or_failed(db, schema) == 0, "a finished job's lease lapsed"
        wait_until(lambda: count_where(db, schema, ids, "completed") == len(ids), 60,
                   "every job, once the stuck write gave up its connection")
    finally:
        worker.stop()
        worker.close()
    assert _lapsed_or_failed(db, schema) == 0
    assert sorted(ran) == sorted({*ran}), "a job ran twice"
