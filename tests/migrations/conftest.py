"""Fixtures for the migration tests: brand-new, empty databases made on demand."""

from __future__ import annotations

import os
import queue
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tests.support.server import dsn_for_database

ROOT = Path(__file__).resolve().parents[2]
# A port nothing listens on: a command that connects to it fails at once.
CLOSED_PORT_DSN = "postgresql://portqueue:s3cretpw@127.0.0.1:1/portqueue"


def _drop(server_dsn: str, database: str) -> None:
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            sql.Identifier(database)))


class Dropper:
    """Drops databases on a thread of its own, one after the other.

    DROP DATABASE ends with a checkpoint of the whole server, which waits for
    every buffer the other tests (and CI's other legs) have dirtied: seconds,
    under load tens of seconds, that a test's teardown need not wait for. A
    name is dropped again before it is created again, so ``wait_for`` waits
    for a pending drop of it first; ``close`` for every drop."""

    def __init__(self, server_dsn: str) -> None:
        self._server_dsn = server_dsn
        self._pending: dict[str, threading.Event] = {}
        self._errors: list[BaseException] = []
        self._lock = threading.Lock()
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="drop-databases", daemon=True)
        self._thread.start()

    def drop(self, database: str) -> None:
        with self._lock:
            self._pending.setdefault(database, threading.Event())
        self._queue.put(database)

    def wait_for(self, database: str) -> None:
        with self._lock:
            done = self._pending.get(database)
        if done is not None:
            done.wait()

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()
        if self._errors:
            raise self._errors[0]

    def _run(self) -> None:
        while (database := self._queue.get()) is not None:
            try:
                _drop(self._server_dsn, database)
            except BaseException as exc:  # reported by close(), at the session's end
                self._errors.append(exc)
            finally:
                with self._lock:
                    self._pending.pop(database).set()


@pytest.fixture(scope="session")
def dropper(pg_server_dsn: str) -> Iterator[Dropper]:
    running = Dropper(pg_server_dsn)
    try:
        yield running
    finally:
        running.close()


@pytest.fixture
def new_database(pg_server_dsn: str, dropper: Dropper) -> Iterator[Callable[[str], str]]:
    """``new_database(label)`` creates an empty database and returns its DSN.

    Names are unique per xdist worker and label, so parallel workers never
    share one; every database is dropped once the test has ended (by
    ``dropper``, while the next tests run).
    """
    worker = re.sub(r"\W", "_", os.environ.get("PYTEST_XDIST_WORKER", "main"))
    created: list[str] = []

    def create(label: str) -> str:
        database = f"pq_mig_{label}_{worker}_{os.getpid()}"
        dropper.wait_for(database)
        _drop(pg_server_dsn, database)
        with psycopg.connect(pg_server_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
        created.append(database)
        return dsn_for_database(pg_server_dsn, database)

    yield create
    for database in created:
        dropper.drop(database)


def cli_command() -> list[str]:
    """The ``portqueue`` console script of the running environment."""
    script = Path(sys.executable).parent / "portqueue"
    return [str(script)] if script.exists() else [sys.executable, "-m", "portqueue.cli"]


def cli_env(**overrides: str) -> dict[str, str]:
    """The environment minus every portqueue setting, plus ``overrides``.

    ``PYTHONPATH`` is this checkout alone: the script then runs the code under
    test even where the installed (editable) package points at another
    checkout, as in a git worktree, and nothing else the caller had on it."""
    env = {
        key: value for key, value in os.environ.items()
        if not key.startswith("PORTQUEUE_") and key != "PYTHONPATH"
    }
    env["PYTHONPATH"] = str(ROOT)
    env.update(overrides)
    return env


def run_cli(
    *args: str, env: Mapping[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*cli_command(), *args],
        env=dict(env) if env is not None else cli_env(),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
