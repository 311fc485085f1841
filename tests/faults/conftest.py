"""Fixtures for the fault tests: a ledger emptied per test, and a fleet of
worker processes that never outlives its test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.faults.harness import Figures, Fleet, reset_ledger


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
