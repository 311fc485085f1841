"""pytest fixtures for testing code that uses portqueue, against a real PostgreSQL.

Enable it in a ``conftest.py``: ``pytest_plugins = ["portqueue.testing.pytest_plugin"]``.

- ``portqueue_dsn`` (session): the server, in this order: ``PORTQUEUE_TEST_DSN``
  (or ``PORTQUEUE_DSN``) when set; a testcontainers PostgreSQL when a Docker
  engine answers (``testcontainers[postgres]`` installed); else an embedded
  PostgreSQL (``portqueue[embedded]``), started for the run and stopped at
  its end. Found as portqueue's own suite finds its server.
- ``portqueue_schema`` (session): a schema of this test process's own
  (``portqueue_test_<xdist worker>_<pid>``), migrated once, dropped at the end
  of the run; schemas left by killed runs are dropped first.
- ``pq`` / ``apq``: a ``PortQueue`` / ``AsyncPortQueue`` on that schema, which
  every test starts with empty (its rows are deleted before the test: a few
  milliseconds, against a fifth of a second to migrate a schema per test).
  Registrations (``task``, ``handler``) belong to the test's client; a
  worker it started is stopped after it. ``apq`` is an async fixture: it
  needs pytest-asyncio (or another plugin that runs async fixtures).

Tests run in parallel with pytest-xdist: each process has its schema.

Caveat: the schema is emptied, not recreated, between tests: a test that
alters the schema itself (drops a table) spoils the ones after it.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from portqueue.async_client import AsyncPortQueue
from portqueue.client import PortQueue
from portqueue.migrate import migrate
from portqueue.testing import server

_async_fixture: Any
try:  # pytest-asyncio in strict mode runs only the async fixtures it marked
    import pytest_asyncio

    _async_fixture = pytest_asyncio.fixture
except ImportError:  # another async plugin, or none
    _async_fixture = pytest.fixture

SCHEMA_PREFIX = "portqueue_test_"


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):
        # The run's embedded server, should one be needed: xdist workers
        # inherit its directory, and pytest_unconfigure stops it.
        server.claim_embedded_directory()


def pytest_unconfigure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):
        server.release_embedded_directory()


@pytest.fixture(scope="session")
def portqueue_dsn() -> str:
    """The PostgreSQL the run's clients connect to."""
    return server.server_dsn()


def _drop_orphaned_schemas(conn: psycopg.Connection[Any]) -> None:
    """Schemas of runs that were killed (their process is gone)."""
    rows = conn.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE %s",
                        [SCHEMA_PREFIX.replace("_", "\\_") + "%"]).fetchall()
    for (name,) in rows:
        match = re.fullmatch(rf"{SCHEMA_PREFIX}\w+?_(\d+)", name)
        if match and not server.process_alive(int(match.group(1))):
            with contextlib.suppress(psycopg.Error):
                conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                    sql.Identifier(name)))


def _delete_order(conn: psycopg.Connection[Any], schema: str) -> list[str]:
    """The schema's tables (its migration bookkeeping aside), each after every
    table whose foreign keys reference it, so plain DELETEs can empty them."""
    tables = [row[0] for row in conn.execute(
        "SELECT tablename FROM pg_tables WHERE schemaname = %s AND tablename <> "
        "'alembic_version' ORDER BY tablename", [schema])]
    references = conn.execute(
        "SELECT c.conrelid::regclass::text, c.confrelid::regclass::text FROM pg_constraint c "
        "JOIN pg_namespace n ON n.oid = c.connamespace WHERE c.contype = 'f' AND n.nspname = %s",
        [schema]).fetchall()
    ordered: list[str] = []
    remaining = set(tables)
    while remaining:
        # A table goes once no remaining table references it.
        free = sorted(t for t in remaining if not any(
            source.split(".")[-1].strip('"') in remaining - {t}
            and target.split(".")[-1].strip('"') == t for source, target in references))
        if not free:  # a cycle of references: TRUNCATE copes with it (see _empty)
            return []
        ordered.extend(free)
        remaining.difference_update(free)
    return ordered


@pytest.fixture(scope="session")
def portqueue_schema(portqueue_dsn: str) -> Iterator[str]:
    """This test process's migrated schema (dropped at the end of the run)."""
    worker = re.sub(r"\W", "_", os.environ.get("PYTEST_XDIST_WORKER", "main"))
    schema = f"{SCHEMA_PREFIX}{worker}_{os.getpid()}"
    with psycopg.connect(portqueue_dsn, autocommit=True) as conn:
        _drop_orphaned_schemas(conn)
    migrate(portqueue_dsn, schema=schema)
    yield schema
    with psycopg.connect(portqueue_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.fixture(scope="session")
def _portqueue_cleanup(portqueue_dsn: str,
                       portqueue_schema: str) -> Iterator[Callable[[], None]]:
    # Found once: the statement that empties the schema, and a connection
    # kept for the run to send it on (each test then pays one round trip).
    with psycopg.connect(portqueue_dsn, autocommit=True) as conn:
        order = _delete_order(conn, portqueue_schema)
        if order:
            # DELETE, not TRUNCATE: on tables of a few rows it is faster
            # (TRUNCATE makes new files for each table and index;
            # docs/performance.md, "Testing your code: the plugin's cost").
            statement = sql.SQL("; ").join(
                sql.SQL("DELETE FROM {}").format(sql.Identifier(portqueue_schema, table))
                for table in order)
        else:
            statement = sql.SQL("TRUNCATE {}").format(sql.SQL(", ").join(
                sql.Identifier(portqueue_schema, table) for table in
                [row[0] for row in conn.execute(
                    "SELECT tablename FROM pg_tables WHERE schemaname = %s AND tablename "
                    "<> 'alembic_version'", [portqueue_schema])]))
        emptying = sql.Composed([sql.SQL("BEGIN; "), statement, sql.SQL("; COMMIT")])

        def empty() -> None:
            conn.execute(emptying)

        yield empty


@pytest.fixture
def _portqueue_empty_schema(portqueue_schema: str,
                            _portqueue_cleanup: Callable[[], None]) -> str:
    _portqueue_cleanup()
    return portqueue_schema


@pytest.fixture
def pq(portqueue_dsn: str, _portqueue_empty_schema: str) -> Iterator[PortQueue]:
    """A ``PortQueue`` on this run's migrated schema, emptied for the test."""
    client = PortQueue(portqueue_dsn, schema=_portqueue_empty_schema)
    try:
        yield client
    finally:
        client.stop(abort=True)
        client.close()


@_async_fixture  # type: ignore[untyped-decorator]
async def apq(portqueue_dsn: str, _portqueue_empty_schema: str) -> AsyncIterator[AsyncPortQueue]:
    """An ``AsyncPortQueue`` on this run's migrated schema, emptied for the test."""
    client = AsyncPortQueue(portqueue_dsn, schema=_portqueue_empty_schema)
    try:
        yield client
    finally:
        await client.stop(abort=True)
        await client.aclose()
