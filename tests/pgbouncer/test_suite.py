"""The whole integration suite through PgBouncer in transaction mode, every
client with ``poll_only=True`` (PORTQUEUE_TEST_PGBOUNCER=1, see mode.py), in
a subprocess.

It takes a few minutes, so it runs once per CI: against the server named by
PORTQUEUE_TEST_DSN (the machine's PostgreSQL), and is skipped against the
embedded one unless PORTQUEUE_TEST_PGBOUNCER_EVERYWHERE=1.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.pgbouncer import mode
from tests.pgbouncer.bouncer import available

ROOT = Path(__file__).resolve().parents[2]
BUDGET_SECONDS = 240
WORKERS = "2"
# Left out of the subprocess run: it starts an embedded server of its own and
# never connects to the test server, so PgBouncer has nothing to do with it
# (and its own stop-at-exit check is timing-sensitive on a loaded host).
NEVER_THROUGH_PGBOUNCER = [
    "tests/integration/test_demo.py::test_demo_without_a_dsn_starts_an_embedded_server",
]


def test_every_skipped_test_exists() -> None:
    # An entry for a renamed test would silently stop skipping anything.
    for node in [*mode.NEEDS_A_SESSION, *NEVER_THROUGH_PGBOUNCER]:
        path, name = node.split("::")
        tree = ast.parse((ROOT / path).read_text())
        names = {f.name for f in ast.walk(tree)
                 if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
        assert name in names, f"{node} is not a test any more"


@pytest.mark.slow
def test_the_integration_suite_passes_through_pgbouncer_with_poll_only(
    pg_server_dsn: str,
) -> None:
    reason = available()
    if reason is not None:
        pytest.skip(reason)
    if mode.enabled():
        pytest.skip("already running in PgBouncer mode")
    if not os.environ.get("PORTQUEUE_TEST_DSN") and not os.environ.get(
            "PORTQUEUE_TEST_PGBOUNCER_EVERYWHERE"):
        pytest.skip("the PgBouncer suite runs once per CI, against PORTQUEUE_TEST_DSN's server; "
                    "PORTQUEUE_TEST_PGBOUNCER_EVERYWHERE=1 runs it here too")
    env = {**os.environ, mode.SWITCH: "1", "PORTQUEUE_TEST_DSN": pg_server_dsn}
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("PYTEST_XDIST_WORKER_COUNT", None)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/integration", "-q", "-x", "-p", "no:randomly",
         "-p", "no:cacheprovider", "-n", WORKERS, "-rfEs",
         *(f"--deselect={node}" for node in NEVER_THROUGH_PGBOUNCER)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=3 * BUDGET_SECONDS,
        check=False)
    elapsed = time.monotonic() - started
    failures = [line for line in done.stdout.splitlines()
                if line.startswith(("FAILED", "ERROR"))]
    tail = done.stdout[-6000:] + done.stderr[-2000:]
    assert done.returncode == 0, f"the suite failed through PgBouncer: {failures}\n{tail}"
    assert " passed" in done.stdout
    print(f"integration suite through PgBouncer: {elapsed:.0f}s; "
          f"{done.stdout.strip().splitlines()[-1]}")
