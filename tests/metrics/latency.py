"""What the start-latency tests share (test_start_latency.py,
test_start_latency_after_abort.py): a Prometheus registry instrumenting the
test's client, a real ``portqueue worker`` process on tests/metrics/stall_app.py
whose handler holds its job, and the latency histogram's samples."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from portqueue import PortQueue
from portqueue.metrics import instrument
from tests.migrations.conftest import cli_command, cli_env

ROOT = Path(__file__).resolve().parents[2]
QUEUE = "m-stall"  # as in tests/metrics/stall_app.py
LEASE_SECONDS = 2


@pytest.fixture(name="registry")
def registry_fixture(pq: PortQueue) -> Iterator[CollectorRegistry]:
    """Import it as ``registry_fixture``; tests take it as ``registry``."""
    registry = CollectorRegistry()
    metrics = instrument(pq, registry=registry, cache_seconds=0)
    try:
        yield registry
    finally:
        metrics.close()


@contextmanager
def stall_worker(pg_dsn: str, schema: str, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``portqueue worker tests.metrics.stall_app:pq``, killed (SIGKILL) on exit."""
    with log.open("w") as output:
        worker = subprocess.Popen(
            [*cli_command(), "worker", "tests.metrics.stall_app:pq", "--no-scheduler",
             "--no-maintenance", "--poll-interval", "0.2"],
            cwd=ROOT, env=cli_env(PORTQUEUE_DSN=pg_dsn, PORTQUEUE_SCHEMA=schema),
            stdout=output, stderr=subprocess.STDOUT)
        try:
            yield worker
        finally:
            worker.kill()
            worker.wait(timeout=30)


def add_job_for_a_second_worker(pq: PortQueue) -> str:
    """Declares QUEUE on ``pq`` as stall_app does, with a handler that finishes
    at once (for the in-process worker that runs the job after the process
    lost it), and adds one job."""

    @pq.handler(QUEUE, lease_seconds=LEASE_SECONDS, retry={"max_attempts": 2})
    def finish(job: Any) -> str:
        return "finished by the second worker"

    job_id = pq.add_job(queue=QUEUE, data={}).job_id
    assert job_id
    return job_id


def latency_sample(registry: CollectorRegistry, suffix: str) -> float | None:
    """``portqueue_job_start_latency_seconds_<suffix>`` of QUEUE."""
    return registry.get_sample_value(f"portqueue_job_start_latency_seconds_{suffix}",
                                     {"queue": QUEUE})


def seconds(later: datetime, earlier: datetime) -> float:
    return (later - earlier).total_seconds()
