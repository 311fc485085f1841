"""Fixtures for the fault tests: a ledger emptied per test, and a fleet of
worker processes that never outlives its test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from portqueue.embedded import EmbeddedUnavailable
from tests.faults.harness import Figures, Fleet, reset_ledger
from tests.faults.owned_server import OwnedServer
from tests.faults.proxy import Proxy, Upstream


@pytest.fixture
def ledger_db(db: psycopg.Connection[Any], schema: str) -> psycopg.Connection[Any]:
    """``db`` with ``faults.ledger`` and ``faults.effect`` present and empty."""
    reset_ledger(db)
    return db


@pytest.fixture
def fleet(pg_dsn: str, schema: str, ledger_db: psycopg.Connection[Any],
          tmp_path: Path) -> Iterator[Fleet]:
    """Spawns processes for this test; kills (SIGCONT, SIGKILL) any still running."""
    fleet = Fleet(pg_dsn, schema, tmp_path, ledger_db)
    try:
        yield fleet
    finally:
        fleet.close()


@pytest.fixture
def report(request: pytest.FixtureRequest) -> Iterator[Any]:
    """``report(figures, **extra)``: the scenario's figures, printed (visible
    with ``-s`` or ``-rP``) and attached to the JUnit report."""
    lines: list[str] = []

    def add(figures: Figures, **extra: Any) -> None:
        line = figures.line(request.node.name, **extra)
        lines.append(line)
        request.node.user_properties.append(("faults", line))

    yield add
    for line in lines:
        print(line)


@pytest.fixture
def proxy(pg_dsn: str) -> Iterator[Proxy]:
    """A TCP proxy in front of the test server (see ``proxy.py``); connect
    through ``proxy.dsn(pg_dsn)``. Closed, with every link, after the test."""
    running = Proxy(Upstream.from_dsn(pg_dsn))
    try:
        yield running
    finally:
        running.close()


@pytest.fixture
def owned_server(request: pytest.FixtureRequest) -> Iterator[OwnedServer]:
    """A started PostgreSQL of this test's own, to stop and restart at will
    (skipped without the ``embedded`` extra, whose binaries it runs).
    Parametrize it indirectly with ``{"max_connections": N}`` for a smaller one."""
    try:
        server = OwnedServer(**getattr(request, "param", {}))
    except EmbeddedUnavailable as exc:
        pytest.skip(str(exc))
    try:
        server.start()
        yield server
    finally:
        server.close()
