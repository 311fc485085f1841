"""SPEC §2: the job row's ``error`` is the newest error's message as text, NULL
when there is none, so that SQL users can write
``SELECT id, error FROM portqueue.job WHERE status = 'failed'`` (issue 16, item 10).

Written by the two statements that add an error: a handler's failure (the
worker's fail_jobs) and a lapsed lease (the rescuer)."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from portqueue import JobStatus
from portqueue.maintenance import run_pass
from tests.support.rows import job_row, update_job
from tests.support.waiting import wait_until
from tests.support.workers import SyncHarness

Db = psycopg.Connection[Any]


class Boom(Exception):
    pass


def failed_errors(db: Db, schema: str) -> dict[str, str | None]:
    """The SPEC's query, as an SQL user writes it (the schema name aside)."""
    rows = db.execute(sql.SQL("SELECT id, error FROM {} WHERE status = 'failed'").format(
        sql.Identifier(schema, "job"))).fetchall()
    return {str(job_id): error for job_id, error in rows}


def test_a_failed_jobs_error_is_its_newest_message(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    pq = harness.pq

    @pq.handler("fragile", retry={"max_attempts": 2, "delay_seconds": 0})
    def handler(job: Any) -> str:
        if job.data == "ok":
            return "fine"
        raise Boom(f"attempt {job.attempt} of {job.data}")

    harness.start()
    failing = pq.add_job(queue="fragile", data="doomed").job_id
    fine = pq.add_job(queue="fragile", data="ok").job_id
    assert failing and fine
    for job_id in (failing, fine):
        pq.wait_for_job(job_id=job_id, timeout_seconds=20)

    assert failed_errors(db, schema) == {failing: "attempt 2 of doomed"}
    assert job_row(db, schema, fine)["error"] is None, "no error: NULL"
    snapshot = pq.get_job(job_id=failing)
    assert snapshot is not None and snapshot.status is JobStatus.FAILED
    assert [e["message"] for e in snapshot.errors] == ["attempt 1 of doomed",
                                                      "attempt 2 of doomed"]


def test_a_retried_attempts_error_is_there_while_it_waits_to_run_again(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    pq = harness.pq

    @pq.handler("later", retry={"max_attempts": 3, "delay_seconds": 3600})
    def handler(job: Any) -> None:
        raise Boom("try again in an hour")

    harness.start()
    job_id = pq.add_job(queue="later", data={}).job_id
    assert job_id
    row = wait_until(lambda: (r := job_row(db, schema, job_id))["error"] and r,
                     what="the first attempt's failure")
    assert row["status"] == "pending" and row["error"] == "try again in an hour"


def test_a_lapsed_lease_is_the_error_of_the_rescued_job(
    db: Db, pg_dsn: str, schema: str, harness: SyncHarness
) -> None:
    job_id = harness.pq.add_job(queue="lost", data={}).job_id
    assert job_id
    update_job(db, schema, job_id, "status = 'active', attempt = 1, lease_token = 1, "
               "lease_expires_at = now() - interval '1 s', started_at = now()")
    assert run_pass(pg_dsn, schema=schema)["rescuer"] == 1
    assert failed_errors(db, schema) == {
        job_id: "the worker running this attempt stopped renewing its lease"}
