"""``portqueue demo``: the README's "run it" command, run as a user runs it (a subprocess)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from portqueue.demo import SCHEMA_MARK, Plan

pytestmark = pytest.mark.slow

JOBS = 60
PLAN = Plan.for_jobs(JOBS)
# A fresh data directory, initdb included, then the demo itself: about 5 s here.
EMBEDDED_BUDGET_SECONDS = 15


def run_demo(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).parent / "portqueue"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "portqueue.cli"]
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("PORTQUEUE_") and key != "PYTHONPATH"}
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


def assert_summary(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    #                      pending active completed failed cancelled expired
    assert table_row(out, "demo") == [0, 0, JOBS - PLAN.broken - 1, PLAN.broken, 0, 0]
    assert table_row(out, "demo-long") == [0, 0, 0, 0, 1, 0]
    assert table_row(out, "demo-dead") == [PLAN.broken, 0, 0, 0, 0, 0]
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
