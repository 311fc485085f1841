"""``AddJobResult.created_at``: every one-off add reports its job's ``created_at``
as the row holds it (the database clock), read back from the insert itself."""

from __future__ import annotations

from typing import Any

import psycopg

from portqueue import AddJobResult
from portqueue.tx import from_psycopg
from tests.support.rows import fetch_one

Db = psycopg.Connection[Any]


def stored_created_at(db: Db, schema: str, result: AddJobResult) -> Any:
    row = fetch_one(db, schema, "job", "id = %s", [result.job_id])
    assert row is not None
    return row["created_at"]


def test_each_add_path_reports_the_rows_created_at(client: Any, db: Db, schema: str) -> None:
    added = [
        client.add_job(queue="fresh", data={}),                       # creates the queue
        client.add_job(queue="fresh", data={}),                       # the open-queue insert
        client.add_job(queue="fresh", data={}, priority=3),           # … with options
        client.add_job(queue="fresh", data={}, idempotency_key="k"),  # keyed
        *client.add_jobs(queue="fresh", jobs=[{"data": 1}, {"data": 2, "schedule": {
            "start_after_seconds": 60}}]),
        *client.add_jobs(queue="fresh", jobs=[{"data": 3, "singleton_key": "s"}, {"data": 4}]),
        *client.add_jobs(queue="fresh", jobs=[{"data": n} for n in range(300)]),  # streamed
    ]
    for result in added:
        assert result.created_at is not None and result.created_at.utcoffset() is not None
        assert result.created_at == stored_created_at(db, schema, result)
        assert client.get_job(job_id=result.job_id).created_at == result.created_at


def test_a_deduplicated_add_reports_the_existing_jobs_created_at(
    client: Any, db: Db, schema: str
) -> None:
    first = client.add_job(queue="dedup", data={}, idempotency_key="once")
    again = client.add_job(queue="dedup", data={}, idempotency_key="once")
    (batched,) = client.add_jobs(queue="dedup", jobs=[{"data": {}, "idempotency_key": "once"}])
    for duplicate in (again, batched):
        assert duplicate.deduplicated and duplicate.job_id == first.job_id
        assert duplicate.created_at == first.created_at == stored_created_at(db, schema, first)


def test_a_recurring_add_has_no_created_at(client: Any) -> None:
    recurring = client.add_job(queue="cron", data={}, schedule={"start_every_seconds": 60})
    assert recurring.job_id is None and recurring.created_at is None


def test_inside_a_transaction_created_at_is_its_now(pg_dsn: str, pq: Any) -> None:
    with psycopg.connect(pg_dsn) as conn, conn.transaction():
        row = conn.execute("SELECT now()").fetchone()
        assert row is not None
        result = pq.add_job(queue="tx", data={}, tx=from_psycopg(conn))
        assert result.created_at == row[0]
