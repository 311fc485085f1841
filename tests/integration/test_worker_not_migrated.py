"""``portqueue worker`` on a schema that was never migrated (issue 18, item 4):
one clear line that says to run ``portqueue migrate``, exit 1, and none of
asyncio's "Task was destroyed but it is pending" noise at interpreter exit.
A real process, as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from portqueue import PortQueue, SchemaNotMigrated

ROOT = Path(__file__).resolve().parents[2]
NEVER_MIGRATED = "pq_never_migrated"


def worker_env(dsn: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("PORTQUEUE_")}
    # This checkout's code, not whatever portqueue the environment installed.
    env.update(PORTQUEUE_DSN=dsn, PORTQUEUE_SCHEMA=NEVER_MIGRATED, PYTHONPATH=str(ROOT))
    return env


@pytest.mark.slow
@pytest.mark.parametrize("client", ["pq", "apq"])
@pytest.mark.parametrize("extra", [[], ["--queues", "", "--no-maintenance"]])
def test_a_worker_on_an_unmigrated_schema_says_run_migrate(
    pg_dsn: str, client: str, extra: list[str]
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "portqueue.cli", "worker", f"tests.integration.docs_app:{client}",
         *extra],
        cwd=ROOT, env=worker_env(pg_dsn), capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines == [f"portqueue: error: schema {NEVER_MIGRATED!r} has no portqueue tables: "
                     "run `portqueue migrate` (or pass the right --schema)"], done.stderr


def test_an_in_process_start_raises_schema_not_migrated(pg_dsn: str) -> None:
    with PortQueue(pg_dsn, schema=NEVER_MIGRATED) as pq:
        pq.handler("emails")(lambda job: None)
        with pytest.raises(SchemaNotMigrated, match="run `portqueue migrate`"):
            pq.start(maintenance=False, scheduler=False)
        # Nothing was left running: a second try fails the same way, not "already running".
        with pytest.raises(SchemaNotMigrated):
            pq.start(maintenance=False, scheduler=False)
