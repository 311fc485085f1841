"""``portqueue worker … --metrics-port``: a real worker process serves its
metrics over HTTP; scraped after real jobs ran, the counters are exact and
the gauges match the database. SIGTERM still ends it cleanly."""

from __future__ import annotations

import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families
from typer.testing import CliRunner

from portqueue import PortQueue
from portqueue.cli import app
from tests.migrations.conftest import cli_command, cli_env
from tests.support.ports import free_port
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
Db = psycopg.Connection[Any]


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            text = response.read().decode()
    except (urllib.error.URLError, ConnectionError):
        return None  # not listening yet
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def test_worker_serves_exact_counters_and_database_gauges(
    pq: PortQueue, pg_dsn: str, schema: str, db: Db, tmp_path: Path
) -> None:
    port = free_port()
    log = (tmp_path / "worker.log").open("w")
    worker = subprocess.Popen(
        [*cli_command(), "worker", "tests.metrics.app:pq", "--metrics-port", str(port),
         "--no-scheduler", "--no-maintenance", "--poll-interval", "0.2"],
        cwd=ROOT, env=cli_env(PORTQUEUE_DSN=pg_dsn, PORTQUEUE_SCHEMA=schema),
        stdout=log, stderr=subprocess.STDOUT)
    try:
        pq.add_jobs(queue="cli-metrics", jobs=[{"data": n} for n in range(3)])
        query = (f"SELECT queue, status::text, count(*) FROM {schema}.job "  # noqa: S608
                 "GROUP BY 1, 2 ORDER BY 1, 2")
        settled_rows = [("cli-followup", "pending", 3), ("cli-metrics", "completed", 3)]
        # Scraped only once the database has settled: the gauges' first read
        # is cached for 5 s, and must see the final rows.
        wait_until(lambda: db.execute(query).fetchall() == settled_rows, timeout=20,
                   what="the jobs to run")

        def settled() -> Any:
            samples = scrape(port)
            if samples is None:
                return None
            counted = {name: samples.get((name, (("queue", queue),)))
                       for name, queue in (("portqueue_jobs_completed_total", "cli-metrics"),
                                           ("portqueue_jobs_added_total", "cli-followup"))}
            return samples if set(counted.values()) == {3.0} else None

        samples = wait_until(settled, timeout=20, what="the worker's metrics")
        assert samples[("portqueue_jobs_started_total", (("queue", "cli-metrics"),))] == 3
        # The jobs were added by this test process, not by the worker.
        assert ("portqueue_jobs_added_total", (("queue", "cli-metrics"),)) not in samples
        assert samples[("portqueue_job_run_seconds_count", (("queue", "cli-metrics"),))] == 3
        assert samples[
            ("portqueue_job_start_latency_seconds_count", (("queue", "cli-metrics"),))] == 3
        for queue, status, count in settled_rows:
            key = ("portqueue_queue_jobs", (("queue", queue), ("status", status)))
            assert samples[key] == count
        assert samples[("portqueue_queue_jobs",
                        (("queue", "cli-followup"), ("status", "completed")))] == 0
    finally:
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(timeout=30)
        log.close()
    assert code == 0, (tmp_path / "worker.log").read_text()
    assert f"serving metrics at http://127.0.0.1:{port}/metrics" in (
        tmp_path / "worker.log").read_text()



def test_metrics_port_without_the_extra_is_a_usage_error(
    pg_dsn: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Exit 2, naming the extra to install, before the worker starts anything."""
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # as if not installed
    monkeypatch.delitem(sys.modules, "portqueue.metrics.prometheus", raising=False)
    monkeypatch.setenv("PORTQUEUE_DSN", pg_dsn)
    monkeypatch.setenv("PORTQUEUE_SCHEMA", schema)
    # --poll-interval 0 is refused when the worker starts: were the metrics
    # started after all, the test would fail on the message, not hang.
    result = CliRunner().invoke(app, ["worker", "tests.metrics.app:pq", "--metrics-port", "0",
                                      "--poll-interval", "0"])
    assert result.exit_code == 2, result.output
    assert "pip install 'portqueue[metrics]'" in result.output


def test_a_bad_listen_check_is_a_usage_error_naming_it(
    pg_dsn: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--listen-check-seconds reaches the worker's own validation: exit 2, named."""
    monkeypatch.setenv("PORTQUEUE_DSN", pg_dsn)
    monkeypatch.setenv("PORTQUEUE_SCHEMA", schema)
    result = CliRunner().invoke(app, ["worker", "tests.metrics.app:pq",
                                      "--listen-check-seconds", "0"])
    assert result.exit_code == 2, result.output
    assert "listen_check_seconds" in result.output
