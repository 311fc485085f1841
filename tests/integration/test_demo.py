"""``portqueue demo``: the README's "run it" command, run as a user runs it (a subprocess)."""

from __future__ import annotations

import io
import logging
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from rich.console import Console

from portqueue.cli.demo_run import SCHEMA_MARK, Plan, demo_logging

pytestmark = pytest.mark.slow

JOBS = 60
PLAN = Plan.for_jobs(JOBS)
# A fresh data directory, initdb included, then the demo itself, with room for
# a busy host (docs/performance.md).
EMBEDDED_BUDGET_SECONDS = 15


def run_demo(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).parent / "portqueue"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "portqueue.cli"]
    # PYTHONPATH kept: from a worktree, it is what makes the demo run that tree's code.
    env = {key: value for key, value in os.environ.items() if not key.startswith("PORTQUEUE_")}
    env["COLUMNS"] = "200"  # one table row per line, whatever the terminal
    return subprocess.run([*command, "demo", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def table_row(stdout: str, queue: str) -> list[int]:
    """The counts of the summary table's row for ``queue``, in JobStatus order."""
    for line in stdout.splitlines():
        cells = [cell.strip() for cell in re.split(r"[│|]", line) if cell.strip()]
        if cells and cells[0] == queue:
            return [int(cell) for cell in cells[1:]]
    raise AssertionError(f"no summary row for {queue!r} in:\n{stdout}")


def assert_no_error_records(result: subprocess.CompletedProcess[str]) -> None:
    """The deliberate failures are the plan: no ERROR record, no traceback, on
    either stream (the worker's records print through the demo's console)."""
    both = result.stdout + result.stderr
    for sign in ("ERROR", "Traceback", "DemoFailure"):
        assert sign not in both, both


def assert_summary(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, result.stdout + result.stderr
    assert_no_error_records(result)
    out = result.stdout
    #                      pending active completed failed cancelled expired
    assert table_row(out, "demo") == [0, 0, JOBS - PLAN.broken - 1, PLAN.broken, 0, 0, 0]
    assert table_row(out, "demo-long") == [0, 0, 0, 0, 1, 0, 0]
    assert table_row(out, "demo-dead") == [PLAN.broken, 0, 0, 0, 0, 0, 0]
    assert re.search(r"throughput\s+[\d,]+ jobs/s", out), out
    assert re.search(r"commit-to-start\s+p50 [\d.]+ ms, p99 [\d.]+ ms", out), out
    assert "cancel_job: SIGNALLED" in out
    last = out.strip().splitlines()[-1]
    assert re.fullmatch(
        rf"portqueue demo: {JOBS} jobs: {JOBS - PLAN.broken - 1} completed, {PLAN.broken} "
        rf"failed, 1 cancelled, {PLAN.broken} dead-lettered; [\d.]+ s", last), last


def job_counts(conn: psycopg.Connection[Any], schema: str) -> dict[tuple[str, str], int]:
    rows = conn.execute(sql.SQL(
        "SELECT queue, status::text, count(*) FROM {}.job GROUP BY 1, 2").format(
            sql.Identifier(schema))).fetchall()
    return {(queue, status): count for queue, status, count in rows}


def test_demo_on_the_test_database(pg_dsn: str) -> None:
    schema = "portqueue_demo"
    # A previous run's leftovers: the demo drops its own schema and starts afresh.
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("COMMENT ON SCHEMA {} IS {}").format(
            sql.Identifier(schema), sql.Literal(SCHEMA_MARK)))
        conn.execute(sql.SQL("CREATE TABLE {}.leftover ()").format(sql.Identifier(schema)))

    assert_summary(run_demo("--jobs", str(JOBS), "--dsn", pg_dsn))

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert conn.execute("SELECT to_regclass('portqueue_demo.leftover')").fetchone() == (None,)
        assert job_counts(conn, schema) == {
            ("demo", "completed"): JOBS - PLAN.broken - 1,
            ("demo", "failed"): PLAN.broken,
            ("demo-long", "cancelled"): 1,
            ("demo-dead", "pending"): PLAN.broken,
        }
        # Every dead-letter copy names the failed job it came from.
        unmatched = conn.execute(
            "SELECT count(*) FROM portqueue_demo.job AS d"
            " LEFT JOIN portqueue_demo.job AS s ON s.id = d.source_job_id"
            " WHERE d.queue = 'demo-dead' AND (s.status IS DISTINCT FROM 'failed'"
            "  OR s.data <> d.data)").fetchone()
        assert unmatched == (0,)


def test_demo_refuses_a_schema_it_did_not_create(pg_dsn: str) -> None:
    schema = "not_the_demos"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("CREATE TABLE {}.precious (x int)").format(sql.Identifier(schema)))
    try:
        result = run_demo("--jobs", str(JOBS), "--dsn", pg_dsn, "--schema", schema)
        assert result.returncode == 1, result.stdout + result.stderr
        assert "was not created by portqueue demo" in result.stderr
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            assert conn.execute(
                "SELECT to_regclass('not_the_demos.precious')").fetchone() != (None,)
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                sql.Identifier(schema)))


def test_demo_without_a_dsn_starts_an_embedded_server(tmp_path: Path) -> None:
    data_dir = tmp_path / "pgdata"
    result = run_demo("--jobs", str(JOBS), "--data-dir", str(data_dir),
                      timeout=EMBEDDED_BUDGET_SECONDS * 4)
    assert_summary(result)
    assert "starting an embedded PostgreSQL" in result.stdout
    assert (data_dir / "PG_VERSION").exists()
    # Stopped at exit: no server is left running on the directory.
    assert not (data_dir / "postmaster.pid").exists()


FAILED_RECORD = "job %s on %r failed (attempt %d/%d%s): %s: %s"


@pytest.fixture
def demo_console() -> Iterator[io.StringIO]:
    """What the demo's logging prints; portqueue's logger restored afterwards."""
    logger = logging.getLogger("portqueue")
    saved = logger.handlers[:], logger.level, logger.propagate
    out = io.StringIO()
    yield out
    logger.handlers[:], logger.level, logger.propagate = saved


def log_failures(out: io.StringIO, level: str) -> str:
    demo_logging(Console(file=out, width=200), level)
    worker = logging.getLogger("portqueue.worker")
    worker.error(FAILED_RECORD, "j-broken", "demo", 3, 3, "", "portqueue.cli.demo_run.DemoFailure",
                 "broken on purpose: fails every attempt")
    worker.warning(FAILED_RECORD, "j-flaky", "demo", 1, 3, ", will retry",
                   "portqueue.cli.demo_run.DemoFailure", "flaky on purpose")
    worker.error(FAILED_RECORD, "j-real", "demo", 3, 3, "", "builtins.KeyError", "'n'")
    return out.getvalue()


@pytest.mark.parametrize("level", ["ERROR", "WARNING"])
def test_demo_logging_keeps_real_errors_and_drops_deliberate_ones(
        demo_console: io.StringIO, level: str) -> None:
    lines = log_failures(demo_console, level).splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("ERROR") and "j-real" in lines[0] and "KeyError" in lines[0]


def test_demo_logging_at_info_shows_deliberate_failures_as_info(
        demo_console: io.StringIO) -> None:
    lines = log_failures(demo_console, "INFO").splitlines()
    assert [line.split()[0] for line in lines] == ["INFO", "INFO", "ERROR"], lines
    assert "j-broken" in lines[0] and "j-flaky" in lines[1] and "j-real" in lines[2]
