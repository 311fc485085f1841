"""Scenario 6: the database turns read-only for ~5 s mid-drain, as during a
failover (``ALTER DATABASE … SET default_transaction_read_only`` and every
session terminated, so each reconnects read-only; then the reverse).

Producers get a typed, retryable ``DatabaseUnavailable`` (SQLSTATE 25006) and
nothing is written; the worker backs off (its failures in the window are
counted: no hot loop), recovers on its own once writes work again, and
finishes every job."""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import Any

import psycopg
import pytest
from psycopg import sql

from portqueue import DatabaseUnavailable, PortQueue
from tests.faults.harness import QUEUE, assert_nothing_lost, count_where, ledger_handler
from tests.support.rows import count_jobs
from tests.support.waiting import wait_until

JOBS = 120
# Long enough for the claims' backoff to double four times (0.2 s doubling
# to 10 s), so a worker that did not back off would show.
READ_ONLY_SECONDS = 5.0
# Per worker in the window, well above its backoff schedule (the heartbeat
# fails at most once per lease/3 too) and far below a hot loop, which would
# fail thousands of times.
MAX_FAILURES_IN_WINDOW = 40


def _terminate_others(db: psycopg.Connection[Any]) -> int:
    """End every other session on this database: each reconnects under the
    database's current settings."""
    pids = [r[0] for r in db.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
        "AND pid <> pg_backend_pid()").fetchall()]
    db.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", [pids])

    def gone() -> bool:
        row = db.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)",
                         [pids]).fetchone()
        return row is not None and row[0] == 0

    # pg_terminate_backend only signals: a statement may still be finishing.
    wait_until(gone, 10, "the terminated sessions to end", interval=0.02)
    return len(pids)


def _set_read_only(db: psycopg.Connection[Any], on: bool) -> None:
    database = sql.Identifier(db.info.dbname)
    if on:
        db.execute(sql.SQL("ALTER DATABASE {} SET default_transaction_read_only = on").format(
            database))
    else:
        db.execute(sql.SQL("ALTER DATABASE {} RESET default_transaction_read_only").format(
            database))
    _terminate_others(db)


def _unavailable_add(pq: PortQueue) -> DatabaseUnavailable:
    """``add_job`` in the read-only window: the typed error, once the client's
    terminated connections are replaced by read-only ones (25006)."""
    def attempt() -> DatabaseUnavailable | None:
        with pytest.raises(DatabaseUnavailable) as raised:
            pq.add_job(queue=QUEUE, data={"during": "read-only"})
        return raised.value if raised.value.sqlstate == "25006" else None

    return wait_until(attempt, 10, "add_job to report the read-only database", interval=0.1)


def _add_retrying(pq: PortQueue) -> str | None:
    try:
        return pq.add_job(queue=QUEUE, data={"after": "read-only"}).job_id
    except DatabaseUnavailable:
        return None


@pytest.mark.slow
def test_a_read_only_database_is_a_retryable_error_and_workers_back_off_then_recover(
    pg_dsn: str, ledger_db: psycopg.Connection[Any], schema: str, pq: PortQueue,
    report: Any, caplog: pytest.LogCaptureFixture,
) -> None:
    db = ledger_db
    caplog.set_level(logging.WARNING, logger="portqueue")
    worker = PortQueue(pg_dsn, schema=schema, pool_min_size=0, pool_max_size=4)
    worker.handler(QUEUE, concurrency=4, lease_seconds=3)(ledger_handler(pg_dsn))
    results = pq.add_jobs(queue=QUEUE, jobs=[
        {"data": {"sleep": 0.02}, "retry": {"max_attempts": 3}} for _ in range(JOBS)])
    job_ids = [r.job_id for r in results if r.job_id is not None]
    worker.start(scheduler=False, poll_interval=0.5)
    try:
        wait_until(lambda: count_where(db, schema, job_ids, "completed") >= JOBS // 5, 30,
                   "a fifth of the jobs to complete", interval=0.02)
        jobs_before = count_jobs(db, schema)
        window_start = time.time()
        _set_read_only(db, True)
        # Jobs a worker held when the sessions ended may run again; no other.
        affected = [str(r[0]) for r in db.execute(sql.SQL(
            "SELECT id FROM {} WHERE status = 'active' OR (status = 'pending' AND attempt > 0)"
        ).format(sql.Identifier(schema, "job"))).fetchall()]
        error = _unavailable_add(pq)
        assert "read-only" in str(error)
        assert isinstance(error.__cause__, psycopg.errors.ReadOnlySqlTransaction)
        assert count_jobs(db, schema) == jobs_before, "a refused add wrote something"
        completed_at_start = count_where(db, schema, job_ids, "completed")
        # The outage lasts its planned time (the fault, not a wait for an outcome).
        time.sleep(max(0.0, window_start + READ_ONLY_SECONDS - time.time()))
        completed_in_window = count_where(db, schema, job_ids, "completed") - completed_at_start
        window_end = time.time()
        completed_before = count_where(db, schema, job_ids, "completed")
        _set_read_only(db, False)
        recovered = time.monotonic()
        # The first completion after the outage: how long the backoff lasted.
        wait_until(lambda: count_where(db, schema, job_ids, "completed") > completed_before, 20,
                   "a job to complete once writable again", interval=0.05)
        resumed_s = time.monotonic() - recovered

        wait_until(lambda: count_where(db, schema, job_ids, "completed") == JOBS, 40,
                   f"{JOBS} jobs to complete after the database is writable again",
                   interval=0.1)
        drained_s = time.monotonic() - recovered
        # Retryable means it: the producer's next try (on a fresh connection
        # once the pool has dropped its terminated ones) is accepted.
        assert wait_until(lambda: _add_retrying(pq), 10, "add_job to be accepted again")
    finally:
        worker.stop()
        worker.close()

    assert completed_in_window == 0, "a job completed in a read-only database?"
    in_window = [r for r in caplog.records
                 if window_start <= r.created <= window_end and r.name.startswith("portqueue")]
    kinds = Counter(r.getMessage().split(": ", 1)[-1].split(" (", 1)[0] for r in in_window)
    assert len(in_window) <= MAX_FAILURES_IN_WINDOW, f"a hot loop? {kinds}"
    assert any("claim failed" in r.getMessage() for r in in_window), kinds
    figures = assert_nothing_lost(db, schema, job_ids, faulted=affected)
    assert figures.statuses == {"completed": JOBS}
    report(figures, faults=f"read-only {READ_ONLY_SECONDS:.0f}s", held_jobs=len(affected),
           worker_failures_in_window=len(in_window), resumed_s=f"{resumed_s:.1f}",
           drained_s=f"{drained_s:.1f}",
           add_error=type(error).__name__)
