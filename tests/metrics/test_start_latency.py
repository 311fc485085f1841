"""portqueue_job_start_latency_seconds measures each attempt from when it
became eligible: a job whose worker was killed mid-run waits, on its next
attempt, from its rescue, not from its add (the first run and the lapsed
lease are not that attempt's wait). A real worker process is killed; a real
in-process worker rescues the job and runs it again."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry

from portqueue.metrics.prometheus import start_latency
from tests.metrics.latency import (
    LEASE_SECONDS,
    add_job_for_a_second_worker,
    latency_sample,
    registry_fixture,  # noqa: F401 (the registry fixture)
    seconds,
    stall_worker,
)
from tests.support.rows import job_row
from tests.support.snapshots import snapshot
from tests.support.waiting import wait_until
from tests.support.workers import SyncHarness, finished_row, row_where

Db = psycopg.Connection[Any]


def killed_mid_run(pg_dsn: str, schema: str, db: Db, job_id: str, log: Path) -> None:
    """A worker process claims ``job_id`` and is killed while running it."""
    with stall_worker(pg_dsn, schema, log):
        wait_until(lambda: row_where(db, schema, job_id, "status = 'active'"), timeout=60,
                   what=f"the worker process to claim the job ({log})")


def test_a_rescued_attempt_waits_from_its_rescue_not_from_its_add(
    harness: SyncHarness, registry: CollectorRegistry, pg_dsn: str, schema: str, db: Db,
    tmp_path: Path,
) -> None:
    job_id = add_job_for_a_second_worker(harness.pq)
    killed_mid_run(pg_dsn, schema, db, job_id, tmp_path / "killed-worker.log")

    # This process's rescuer takes the lapsed lease back, its worker runs it.
    harness.start(maintenance=True)
    row = wait_until(lambda: finished_row(db, schema, job_id), timeout=60,
                     what="the rescued job to finish")
    assert row["status"] == "completed" and row["attempt"] == 2
    (rescue,) = row["errors"]
    assert rescue["type"] == "LeaseExpired" and rescue["attempt"] == 1

    wait_until(lambda: latency_sample(registry, "count") == 1,
               what="the second attempt's start latency")
    row = job_row(db, schema, job_id)
    rescued_at = datetime.fromisoformat(rescue["at"])
    expected = seconds(row["started_at"], rescued_at)
    latency = latency_sample(registry, "sum")
    assert latency == pytest.approx(expected, abs=1e-3)
    # The scenario tells the two apart: from the add, the first run and the
    # lapsed lease would be counted too.
    assert seconds(row["started_at"], row["created_at"]) > latency + LEASE_SECONDS / 2


def test_an_error_recorded_after_the_start_is_the_attempts_own() -> None:
    """The snapshot is read after the claim: a fast attempt may have failed by
    then, and its own error must not move its start."""
    rescued = "2026-01-01T00:01:00.5+00:00"
    own = "2026-01-01T00:01:02+00:00"
    after_rescue = snapshot(started_at=60.75, attempt=2,
                            errors=[{"attempt": 1, "type": "LeaseExpired", "at": rescued}])
    assert start_latency(after_rescue) == pytest.approx(0.25)
    failed_fast = snapshot(started_at=60.75, attempt=2, errors=[
        {"attempt": 1, "type": "LeaseExpired", "at": rescued}, {"attempt": 2, "at": own}])
    assert start_latency(failed_fast) == pytest.approx(0.25)
    # A job re-armed by retry_job: start_after (the re-arm) is later than its errors.
    rearmed = snapshot(start_after=120.0, started_at=120.5, errors=[{"attempt": 3, "at": own}])
    assert start_latency(rearmed) == pytest.approx(0.5)
