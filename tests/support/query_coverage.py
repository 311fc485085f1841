"""``PORTQUEUE_TEST_EVERY_QUERY=1``: the run fails unless its tests ran every
named query of sql/ at least once.

CI's second-server legs (.ci/run: the embedded PostgreSQL 18 and PgBouncer in
transaction mode) run only the test files in ``SERVER_LEGS``
(tests/support/legs.py), not the whole suite again: what the server's major or
the pooler changes is how each statement runs, and this check proves that no
statement of the product goes untested on either. A behaviour test that does
not depend on the server runs once, on pg15.

Each test process records the name of every query it builds
(``portqueue.queries.Queries.__call__``, which every statement the product
sends goes through), test by test, into a file of its own; the controlling
process (xdist's, or the only one) reads them all at the end. Set
``PORTQUEUE_TEST_QUERY_LOG=<directory>`` to keep those files (one JSON object a
process: test node id -> the names it ran) to choose files for ``SERVER_LEGS``.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from portqueue import queries
from tests.support.legs import NOT_ON_SERVER_LEGS, NOT_THROUGH_PGBOUNCER

SWITCH = "PORTQUEUE_TEST_EVERY_QUERY"
LOG = "PORTQUEUE_TEST_QUERY_LOG"


def enabled() -> bool:
    return bool(os.environ.get(SWITCH)) or bool(os.environ.get(LOG))


class QueryCoverage:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.current = "(outside a test)"
        self.ran: dict[str, set[str]] = {}
        self._original = queries.Queries.__call__

    def install(self) -> None:
        original = self._original
        ran = self.ran

        def recording(this: queries.Queries, name: str, **params: Any) -> queries.Query:
            ran.setdefault(self.current, set()).add(name)
            return original(this, name, **params)

        queries.Queries.__call__ = recording  # type: ignore[method-assign,assignment]

    def uninstall(self) -> None:
        queries.Queries.__call__ = self._original  # type: ignore[method-assign]

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[None]:
        self.current = item.nodeid
        try:
            return (yield)
        finally:
            self.current = "(outside a test)"

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self.uninstall()
        directory = Path(os.environ[LOG])
        directory.mkdir(parents=True, exist_ok=True)
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        (directory / f"{worker}-{os.getpid()}.json").write_text(
            json.dumps({node: sorted(names) for node, names in self.ran.items()}),
            encoding="utf-8")
        if hasattr(self.config, "workerinput") or not os.environ.get(SWITCH):
            return
        from tests.pgbouncer import mode

        exempt = {**NOT_ON_SERVER_LEGS, **(NOT_THROUGH_PGBOUNCER if mode.enabled() else {})}
        missing = self.missing(directory, exempt)
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if missing and session.testscollected:
            if reporter is not None:
                reporter.write_line(
                    f"{SWITCH}: {len(missing)} named queries of sql/ ran in no test of this "
                    f"run: {', '.join(missing)}. Add a test file that runs them to SERVER_LEGS "
                    "(tests/support/legs.py), or say in NOT_ON_SERVER_LEGS (or "
                    "NOT_THROUGH_PGBOUNCER) why it cannot.",
                    red=True)
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        elif reporter is not None:
            reporter.write_line(f"{SWITCH}: every named query of sql/ ran at least once")

    @staticmethod
    def missing(directory: Path, exempt: Mapping[str, str]) -> list[str]:
        """The named queries of sql/ no process's file in ``directory`` ran, but
        those ``exempt`` names."""
        ran: set[str] = set()
        for path in directory.glob("*.json"):
            for names in json.loads(path.read_text(encoding="utf-8")).values():
                ran.update(names)
        wanted = set(queries.load_templates()) - set(exempt)
        return sorted(wanted - ran)


def register(config: pytest.Config) -> None:
    if not enabled():
        return
    if not os.environ.get(LOG):
        # The controller picks the directory before xdist starts its workers,
        # which inherit it.
        os.environ[LOG] = tempfile.mkdtemp(prefix="portqueue-queries-")
    coverage = QueryCoverage(config)
    coverage.install()
    config.pluginmanager.register(coverage, "portqueue-query-coverage")
