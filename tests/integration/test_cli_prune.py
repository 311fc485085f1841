"""`portqueue prune`: one maintenance pass from the command line, with its counts."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import psycopg
from psycopg import sql

from portqueue import PortQueue
from tests.migrations.conftest import cli_command, cli_env
from tests.support.cli import run_on_terminal
from tests.support.rows import count_jobs


def test_prune_removes_jobs_past_retention_and_prints_the_counts(
    pq: PortQueue, pg_dsn: str, db: psycopg.Connection[Any], schema: str
) -> None:
    gone = pq.add_job(queue="emails", data={}, retention={"ttl_seconds": 0}).job_id
    kept = pq.add_job(queue="emails", data={}).job_id
    db.execute(sql.SQL("UPDATE {} SET status = 'completed', finished_at = now() WHERE id = ANY(%s)")
               .format(sql.Identifier(schema, "job")), [[gone, kept]])
    result = subprocess.run(
        [*cli_command(), "prune", "--dsn", pg_dsn, "--schema", schema, "--json"],
        env=cli_env(), capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    counts = json.loads(result.stdout)
    assert counts["pruner"] == 1 and set(counts) >= {"rescuer", "expirer", "pruner", "reaper"}
    assert count_jobs(db, schema) == 1, "only the job whose ttl ran out is pruned"
    assert pq.get_job(job_id=kept) is not None


def test_prune_without_a_database_is_a_usage_error() -> None:
    result = subprocess.run([*cli_command(), "prune"], env=cli_env(), capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.returncode == 2 and "--dsn" in result.stderr


def test_prune_shows_a_progress_bar_on_a_terminal(pg_dsn: str, schema: str) -> None:
    env = cli_env(PORTQUEUE_DSN=pg_dsn, PORTQUEUE_SCHEMA=schema, TERM="xterm", COLUMNS="120")
    code, stdout, terminal = run_on_terminal([*cli_command(), "prune"], env)
    assert code == 0, terminal
    assert "finished jobs pruned: 0" in stdout
    # One step per maintenance service; the last one shown is the throttle pruner's.
    assert "forgetting ended throttle windows" in terminal and "5/5" in terminal
