"""The PgBouncer leg's skip lists stay honest: ``PORTQUEUE_TEST_PGBOUNCER=1``
(tests/pgbouncer/mode.py) runs tests/integration with every client through
PgBouncer in transaction mode, poll_only, as a CI leg of its own (.ci/run)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.pgbouncer import mode

ROOT = Path(__file__).resolve().parents[2]


def test_every_skipped_test_exists() -> None:
    # An entry for a renamed test would silently stop skipping anything.
    for node in [*mode.NEEDS_A_SESSION, *mode.NOT_ROUTED]:
        path, name = node.split("::")
        tree = ast.parse((ROOT / path).read_text())
        names = {f.name for f in ast.walk(tree)
                 if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
        assert name in names, f"{node} is not a test any more"


def test_ci_runs_the_integration_suite_through_pgbouncer() -> None:
    # The switch is the only proof of poll_only through PgBouncer at scale:
    # a CI without its leg would drop that coverage silently.
    ci = (ROOT / ".ci" / "run").read_text()
    assert f"{mode.SWITCH}=1" in ci and "leg_pgbouncer" in ci
