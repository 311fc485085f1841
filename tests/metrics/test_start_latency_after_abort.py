"""portqueue_job_start_latency_seconds after an abort (issue 18, item 10): a
job that an aborting worker released goes back to pending with its
start_after moved to the release, so its next attempt waits from the
release, not from its add (an 82.6 s sample after an abort counted the
aborted run). A real worker process is aborted with SIGINT while its handler
runs; a real in-process worker then runs the job again."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry

from tests.metrics.latency import (
    add_job_for_a_second_worker,
    latency_sample,
    registry_fixture,  # noqa: F401 (the registry fixture)
    seconds,
    stall_worker,
)
from tests.support.rows import job_row
from tests.support.waiting import wait_until
from tests.support.workers import SyncHarness, finished_row, row_where

# The aborted run lasts at least this long, so a latency counted from the add
# is told apart from one counted from the release.
RUN_SECONDS = 1.0
Db = psycopg.Connection[Any]


def aborted_mid_run(pg_dsn: str, schema: str, db: Db, job_id: str, log: Path) -> None:
    """A worker process runs ``job_id`` for RUN_SECONDS, then is aborted
    (SIGINT) and releases it; the process is killed once the row is pending
    (its handler ignores the signal, and the thread would hold the exit)."""
    with stall_worker(pg_dsn, schema, log) as worker:
        wait_until(lambda: row_where(
            db, schema, job_id,
            f"status = 'active' AND started_at < now() - interval '{RUN_SECONDS} s'"),
            timeout=60, what=f"the worker process to run the job a while ({log})")
        worker.send_signal(signal.SIGINT)
        wait_until(lambda: row_where(db, schema, job_id, "status = 'pending'"), timeout=30,
                   what=f"the aborting worker to release the job ({log})")


def test_a_released_attempt_waits_from_its_release_not_from_its_add(
    harness: SyncHarness, registry: CollectorRegistry, pg_dsn: str, schema: str, db: Db,
    tmp_path: Path,
) -> None:
    job_id = add_job_for_a_second_worker(harness.pq)
    added = job_row(db, schema, job_id)
    aborted_mid_run(pg_dsn, schema, db, job_id, tmp_path / "aborted-worker.log")
    released = job_row(db, schema, job_id)
    # Released without spending the attempt, and eligible again from the release.
    assert released["attempt"] == 0 and released["errors"] == []
    assert seconds(released["start_after"], added["start_after"]) > RUN_SECONDS

    harness.start()
    row = wait_until(lambda: finished_row(db, schema, job_id), timeout=60,
                     what="the released job to finish")
    assert row["status"] == "completed" and row["attempt"] == 1

    wait_until(lambda: latency_sample(registry, "count") == 1,
               what="the second attempt's start latency")
    latency = latency_sample(registry, "sum")
    assert latency == pytest.approx(seconds(row["started_at"], released["start_after"]), abs=1e-3)
    # From the add, the aborted run would be counted too.
    assert seconds(row["started_at"], row["created_at"]) > latency + RUN_SECONDS
