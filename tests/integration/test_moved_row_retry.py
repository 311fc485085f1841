"""Issue 24, point 3 of docs/retention.md's design: a statement that meets a
row another transaction moved (to another partition) fails with SQLSTATE
40001 where the single table re-checks the new version. A statement that is
its own transaction is run again by the driver, and its retry sees the row
as the single table would have; inside a transaction nothing is retried.

On today's single table the same SQLSTATE is raised for real under
REPEATABLE READ, when a fenced write waits for a completion of its row: the
heartbeat here (touch_jobs) waits on a completion, which commits, and the
retried touch finds the job completed and writes nothing (its lease lost),
exactly what READ COMMITTED answers without a retry."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import psycopg
import pytest

from portqueue import PortQueue
from portqueue import worker_operations as ops
from portqueue.driver import execute_async, execute_sync
from portqueue.queries import queries_for
from tests.support.waiting import in_background, wait_until

Db = psycopg.Connection[Any]

REPEATABLE_READ = "-c default_transaction_isolation=repeatable\\ read"


def _claimed(pq: PortQueue, db: Db, schema: str) -> ops.Lease:
    pq.add_job(queue="moved", data={})
    q = queries_for(schema)
    claim = ops.claim(q, slots={"moved": 1}, lease_seconds={"moved": 60},
                      matching_patterns=[], refused_patterns=[], worker_id=str(uuid.uuid4()))
    (row,) = db.execute(claim.sql, dict(claim.params)).fetchall()
    return ops.Lease(str(row[0]), int(row[7]))


def _completing(pg_dsn: str, schema: str, lease: ops.Lease) -> psycopg.Connection[Any]:
    """A connection holding the job's row: completed, not committed yet."""
    holder = psycopg.connect(pg_dsn)
    query = ops.complete_jobs(queries_for(schema), [
        ops.completion_entry(lease.id, lease.lease_token, status="completed",
                             output_json="null")])
    holder.execute(query.sql, dict(query.params))
    return holder


def _wait_for_lock(db: Db, pid: int) -> None:
    wait_until(lambda: db.execute(
        "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s",
        [pid]).fetchone() == (True,), what="the touch to wait for the row lock")


def _race(pg_dsn: str, db: Db, schema: str, lease: ops.Lease, *, run: str,
          in_transaction: bool) -> dict[str, Any]:
    touch = ops.touch_jobs(queries_for(schema), [ops.Touch(lease, 60, None, None)])
    outcome: dict[str, Any] = {}
    conn = psycopg.connect(pg_dsn, autocommit=True, options=REPEATABLE_READ)
    holder = _completing(pg_dsn, schema, lease)
    try:
        def touch_sync() -> None:
            try:
                if in_transaction:
                    with conn.transaction():
                        outcome["rows"] = execute_sync(conn, touch)
                else:
                    outcome["rows"] = execute_sync(conn, touch)
            except psycopg.Error as error:
                outcome["error"] = error

        def touch_async() -> None:
            async def main() -> None:
                aconn = await psycopg.AsyncConnection.connect(
                    pg_dsn, autocommit=True, options=REPEATABLE_READ)
                outcome["waiting"] = aconn.info.backend_pid
                try:
                    outcome["rows"] = await execute_async(aconn, touch)
                except psycopg.Error as error:
                    outcome["error"] = error
                finally:
                    await aconn.close()
            asyncio.run(main())

        if run == "sync":
            outcome["waiting"] = conn.info.backend_pid
        thread = in_background(touch_sync if run == "sync" else touch_async)
        _wait_for_lock(db, wait_until(lambda: outcome.get("waiting"),
                                      what="the touch's connection"))
        holder.commit()
        thread.join(timeout=10)
        assert not thread.is_alive()
    finally:
        holder.close()
        conn.close()
    return outcome


@pytest.mark.parametrize("run", ["sync", "async"])
def test_a_statement_of_its_own_is_retried_after_a_serialization_failure(
    pq: PortQueue, db: Db, schema: str, pg_dsn: str, run: str
) -> None:
    lease = _claimed(pq, db, schema)
    outcome = _race(pg_dsn, db, schema, lease, run=run, in_transaction=False)
    assert "error" not in outcome, outcome
    assert outcome["rows"] == []  # fenced: the job completed meanwhile
    assert pq.get_job(job_id=lease.id).status == "completed"


def test_inside_a_transaction_the_failure_is_the_callers(
    pq: PortQueue, db: Db, schema: str, pg_dsn: str
) -> None:
    # The race is real: without the retry, this is what the touch gets.
    lease = _claimed(pq, db, schema)
    outcome = _race(pg_dsn, db, schema, lease, run="sync", in_transaction=True)
    assert isinstance(outcome.get("error"), psycopg.errors.SerializationFailure), outcome

