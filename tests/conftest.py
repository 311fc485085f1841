"""Shared fixtures: a real PostgreSQL, a database per xdist worker, a migrated
schema per worker that is emptied before each test, both clients, and
in-process workers on them (tests/support/workers.py)."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from portqueue import AsyncPortQueue, PortQueue
from portqueue.migrate import migrate
from tests.support import query_coverage, server
from tests.support.clients import BlockingAsyncClient
from tests.support.legs import EVERY_MAJOR, SERVER_LEGS, SPAWNS_PROCESSES

# Re-exported: tests written before these moved to tests/support import them from here.
from tests.support.rows import count_jobs as count_jobs
from tests.support.server import dsn_for_database as dsn_for_database
from tests.support.workers import AsyncHarness, SyncHarness

TEST_SCHEMA = "pq_test"

def _is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    # PORTQUEUE_TEST_PGBOUNCER=1: every client through PgBouncer in transaction
    # mode with poll_only=True (tests/pgbouncer/mode.py).
    from tests.pgbouncer import mode

    if mode.enabled():
        config.pluginmanager.register(mode, "portqueue-pgbouncer")
    # PORTQUEUE_TEST_EVERY_QUERY=1: fail unless every named query of sql/ ran.
    query_coverage.register(config)
    if not _is_xdist_worker(config):
        # The run's own embedded server, if a test needs one: its workers
        # inherit the directory, and pytest_unconfigure stops it.
        server.claim_embedded_directory()


def pytest_unconfigure(config: pytest.Config) -> None:
    if not _is_xdist_worker(config):
        server.release_embedded_directory()


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        if path in SPAWNS_PROCESSES:
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("slow") and path in EVERY_MAJOR:
            item.add_marker(pytest.mark.every_major)
        if path.startswith(SERVER_LEGS):
            item.add_marker(pytest.mark.server_legs)
        if "pg_server_dsn" not in getattr(item, "fixturenames", ()):
            # Nothing of the suite's server in its fixtures: the same test
            # whichever server or pooler a leg runs against.
            item.add_marker(pytest.mark.no_server)


def _worker_name() -> str:
    return re.sub(r"\W", "_", os.environ.get("PYTEST_XDIST_WORKER", "main"))


@pytest.fixture(scope="session")
def pg_server_dsn() -> str:
    return server.server_dsn()


def _drop_orphaned_databases(conn: psycopg.Connection[Any]) -> None:
    """Drop test databases left by killed test runs (their process is gone)."""
    rows = conn.execute(
        "SELECT datname FROM pg_database WHERE datname LIKE 'portqueue\\_test\\_%'"
    ).fetchall()
    for (name,) in rows:
        match = re.fullmatch(r"portqueue_test_\w+?_(\d+)", name)
        if match and not server.process_alive(int(match.group(1))):
            with contextlib.suppress(psycopg.Error):
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))


@pytest.fixture(scope="session")
def pg_dsn(pg_server_dsn: str) -> Iterator[str]:
    """A fresh database of this test process's own (per xdist worker and per run,
    so concurrent test runs on one server never touch each other's rows)."""
    database = f"portqueue_test_{_worker_name()}_{os.getpid()}"
    with psycopg.connect(pg_server_dsn, autocommit=True) as conn:
        _drop_orphaned_databases(conn)
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    yield dsn_for_database(pg_server_dsn, database)
    with psycopg.connect(pg_server_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            sql.Identifier(database)))


@pytest.fixture(scope="session")
def migrated_schema(pg_dsn: str) -> str:
    migrate(pg_dsn, schema=TEST_SCHEMA)
    if os.environ.get("PORTQUEUE_TEST_LAYOUT") == "partitioned":
        # Issue 24's work in progress: the suite on the prototype of the
        # partitioned job table (tests/support/partitioned.py). Not a CI leg:
        # it fails where docs/retention.md's "What is left to build" says.
        from tests.support.partitioned import partition_job_table

        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            partition_job_table(conn, TEST_SCHEMA)
    return TEST_SCHEMA


@pytest.fixture
def db(pg_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit connection for a test's own SQL (arranging and asserting)."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        yield conn


TABLES = ("job", "schedule", "queue", "worker", "queue_start", "throttle_window",
          "subscription", "maintenance_leader")

# One round trip that truncates only the tables written since they were last
# truncated: a heap of zero pages has had no row, committed or aborted, since
# (every insert extends it), so it and its indexes are as TRUNCATE leaves them.
# TRUNCATE makes new files for a table and each of its indexes (the job table
# has over twenty), so all eight before every test cost more than many tests
# do, and most tests write two of them, or none (docs/performance.md, "suite").
# A partitioned table has no heap of its own to measure: always truncated.
_EMPTY_WRITTEN_TABLES = """
DO $$
DECLARE written text;
BEGIN
    SELECT string_agg(format('%I.%I', n.nspname, c.relname), ', ') INTO written
    FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
    WHERE n.nspname = {schema} AND c.relname = ANY ({tables})
      AND (c.relkind = 'p' OR pg_relation_size(c.oid) > 0);
    IF written IS NOT NULL THEN
        EXECUTE 'TRUNCATE ' || written;
    END IF;
END $$"""


@pytest.fixture
def schema(migrated_schema: str, db: psycopg.Connection[Any]) -> str:
    """The migrated test schema, emptied: every test starts from no rows."""
    db.execute(sql.SQL(_EMPTY_WRITTEN_TABLES).format(
        schema=sql.Literal(migrated_schema), tables=sql.Literal(list(TABLES))))
    return migrated_schema


@pytest.fixture
def pq(pg_dsn: str, schema: str) -> Iterator[PortQueue]:
    with PortQueue(pg_dsn, schema=schema, instance_key="test-host-ram-8gb") as client:
        yield client


@pytest.fixture
def apq_factory(pg_dsn: str, schema: str) -> Callable[..., AsyncPortQueue]:
    def factory(**settings: Any) -> AsyncPortQueue:
        settings.setdefault("instance_key", "test-host-ram-8gb")
        return AsyncPortQueue(pg_dsn, schema=schema, **settings)

    return factory


@pytest.fixture
def harness(pq: PortQueue) -> Iterator[SyncHarness]:
    """In-process sync workers on ``pq`` that never outlive the test."""
    h = SyncHarness(pq)
    yield h
    h.close()


@pytest.fixture
async def aharness(apq_factory: Callable[..., AsyncPortQueue]) -> AsyncIterator[AsyncHarness]:
    """In-process async workers on a fresh ``AsyncPortQueue``, stopped with the test."""
    h = AsyncHarness(apq_factory())
    yield h
    await h.close()


@pytest.fixture
def client(pq: PortQueue) -> PortQueue:
    """The client behaviour tests run on. Both clients drive the same sans-IO
    operations and tests/unit/test_generated.py proves their shells equal, so a
    behaviour is tested once; tests/integration/test_client_parity.py proves
    each public method of the async shell reaches the database and returns
    what the sync one does."""
    return pq


@pytest.fixture
def aclient(apq_factory: Callable[..., AsyncPortQueue]) -> Iterator[BlockingAsyncClient]:
    """AsyncPortQueue driven to completion per call, from blocking test code."""
    blocking = BlockingAsyncClient(apq_factory)
    try:
        yield blocking
    finally:
        blocking.close()


@pytest.fixture(params=["sync", "async"])
def both_clients(
    request: pytest.FixtureRequest, pq: PortQueue, aclient: BlockingAsyncClient
) -> Any:
    """PortQueue, then AsyncPortQueue: for what the shells do differently at
    run time (threads on a pool against tasks on one loop), not for behaviour."""
    return pq if request.param == "sync" else aclient
