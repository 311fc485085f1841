"""Migrations serialise on a per-schema advisory lock: deploys can race safely."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from portqueue.migrate import _lock_key, head_revision, migrate
from tests.migrations.catalog import EXPECTED_TABLES, schema_catalog, tables
from tests.migrations.conftest import cli_command, cli_env
from tests.migrations.stepped import INDEX, REVISION, stepped_scripts
from tests.support.waiting import wait_until

HEAD = head_revision()

PROCESSES = 5


def _waiting_on_advisory_lock(conn: psycopg.Connection[Any]) -> int:
    """Migrators waiting for the lock: polling for it (their last statement
    asked for it), or blocked in a lock wait (as migrate did before it polled)."""
    row = conn.execute(
        """
        SELECT count(*) FROM pg_stat_activity
        WHERE datname = current_database() AND application_name = 'portqueue:migrate'
          AND (query LIKE 'SELECT pg_try_advisory_lock(%' AND state IN ('idle', 'active')
               OR wait_event_type = 'Lock' AND wait_event = 'advisory')
        """
    ).fetchone()
    assert row is not None
    return int(row[0])


def _building_concurrently(conn: psycopg.Connection[Any]) -> int:
    """Migrators whose CREATE INDEX CONCURRENTLY waits for an older transaction."""
    row = conn.execute(
        """
        SELECT count(*) FROM pg_stat_activity
        WHERE datname = current_database() AND application_name = 'portqueue:migrate'
          AND query LIKE 'CREATE INDEX CONCURRENTLY%' AND wait_event = 'virtualxid'
        """
    ).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.slow
def test_five_processes_migrate_one_empty_database(new_database: Callable[[str], str]) -> None:
    dsn = new_database("concurrent")
    reference_dsn = new_database("concurrent_ref")
    migrate(reference_dsn)

    with psycopg.connect(dsn, autocommit=True) as conn:
        # Hold the migration lock ourselves, start every process, and let go
        # only once all five are queued on it: they then contend for real,
        # however unevenly they start up.
        conn.execute("SELECT pg_advisory_lock(%s)", [_lock_key("portqueue")])
        processes = [
            subprocess.Popen(
                [*cli_command(), "migrate", "--dsn", dsn], env=cli_env(),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(PROCESSES)
        ]
        try:
            deadline = time.monotonic() + 60
            while (waiting := _waiting_on_advisory_lock(conn)) < PROCESSES:
                finished = [p for p in processes if p.poll() is not None]
                assert not finished, (
                    "a migrate process ended without waiting on the advisory lock: "
                    f"{finished[0].communicate()}")
                assert time.monotonic() < deadline, f"only {waiting} of {PROCESSES} waiting"
                time.sleep(0.05)
            # Nothing may have been created while the lock was held.
            assert conn.execute(
                "SELECT count(*) FROM pg_namespace WHERE nspname = 'portqueue'"
            ).fetchone() == (0,)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", [_lock_key("portqueue")])
            outputs = [p.communicate(timeout=120) for p in processes]

        for process, (stdout, stderr) in zip(processes, outputs, strict=True):
            assert process.returncode == 0, stderr
            assert stdout.strip() == f"portqueue: schema 'portqueue' is at revision {HEAD} (head)"

        catalog = schema_catalog(conn, "portqueue")
    assert tables(catalog) == EXPECTED_TABLES
    assert catalog["alembic_version"] == [(HEAD,)]
    with psycopg.connect(reference_dsn, autocommit=True) as reference:
        assert catalog == schema_catalog(reference, "portqueue")


def test_migrating_twice_is_a_no_op(new_database: Callable[[str], str]) -> None:
    dsn = new_database("twice")
    migrate(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        before = schema_catalog(conn, "portqueue")
        # Object ids and the version row's xmin change if anything is
        # recreated or rewritten, even to the same definition.
        identity = """
            SELECT (SELECT array_agg(c.oid::bigint ORDER BY c.oid) FROM pg_class c
                    WHERE c.relnamespace = 'portqueue'::regnamespace),
                   (SELECT xmin::text FROM portqueue.alembic_version)
        """
        ids_before = conn.execute(identity).fetchone()
        migrate(dsn)
        assert conn.execute(identity).fetchone() == ids_before
        assert schema_catalog(conn, "portqueue") == before
    assert before["alembic_version"] == [(HEAD,)]


def test_a_second_schema_is_independent(new_database: Callable[[str], str]) -> None:
    dsn = new_database("two_schemas")
    migrate(dsn, schema="portqueue")
    migrate(dsn, schema="pq_second")

    with psycopg.connect(dsn, autocommit=True) as conn:
        first = schema_catalog(conn, "portqueue")
        second = schema_catalog(conn, "pq_second")
        # Same shape, each with its own version table, enum and functions.
        assert second == first
        assert tables(second) == EXPECTED_TABLES
        row = conn.execute(
            "SELECT count(*) FROM pg_type WHERE typname = 'job_status' "
            "AND typnamespace IN ('portqueue'::regnamespace, 'pq_second'::regnamespace)"
        ).fetchone()
        assert row == (2,)

        # Rows stay in their own schema.
        conn.execute("INSERT INTO portqueue.queue (name) VALUES ('only-in-first')")
        assert conn.execute("SELECT count(*) FROM pq_second.queue").fetchone() == (0,)

        # The lock is per schema: while the first schema's lock is held, the
        # second still migrates, and the first waits until it is let go.
        conn.execute("SELECT pg_advisory_lock(%s)", [_lock_key("portqueue")])
        waiting = ThreadPoolExecutor(1)
        try:
            migrate(dsn, schema="pq_second")
            waited = waiting.submit(migrate, dsn, schema="portqueue")
            wait_until(lambda: _waiting_on_advisory_lock(conn) == 1, timeout=30,
                       what="the first schema's migrate polling for its lock")
            assert not waited.done()
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", [_lock_key("portqueue")])
            waiting.shutdown()
        waited.result()

        # Dropping one schema leaves the other whole; migrating rebuilds it.
        conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier("portqueue")))
        assert schema_catalog(conn, "pq_second") == second
        migrate(dsn, schema="portqueue")
        assert schema_catalog(conn, "portqueue") == first


@pytest.mark.slow
def test_two_migrators_race_through_a_step_outside_a_transaction(
    new_database: Callable[[str], str], tmp_path: Path
) -> None:
    # docs/retention.md, design point 7: the migrator that has the lock builds
    # an index concurrently, which waits for every older snapshot; the other
    # waits for the lock meanwhile. Waiting in pg_advisory_lock (or in a
    # transaction) the second held a snapshot: deadlock detected.
    dsn = new_database("stepped_race")
    migrate(dsn)
    scripts = stepped_scripts(tmp_path)
    key = _lock_key("portqueue")
    with psycopg.connect(dsn, autocommit=True) as conn, \
            psycopg.connect(dsn, autocommit=True) as writer:
        conn.execute("SELECT pg_advisory_lock(%s)", [key])
        migrators = [subprocess.Popen(
            [sys.executable, "-m", "tests.migrations.stepped", dsn, str(scripts), "portqueue"],
            env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)]
        try:
            wait_until(lambda: _waiting_on_advisory_lock(conn) == 2, timeout=60,
                       what="both migrators polling for the lock")
            # An open write on the job table: the concurrent build waits for
            # it, so the first migrator is inside its step while the second
            # still waits for the lock.
            writer.execute("BEGIN")
            writer.execute("LOCK TABLE portqueue.job IN ROW EXCLUSIVE MODE")
            conn.execute("SELECT pg_advisory_unlock(%s)", [key])
            wait_until(lambda: _building_concurrently(conn) == 1, timeout=60,
                       what="one migrator building the index concurrently")
            wait_until(lambda: _waiting_on_advisory_lock(conn) == 1, timeout=60,
                       what="the other polling for the lock meanwhile")
            writer.execute("COMMIT")
            outputs = [m.communicate(timeout=120) for m in migrators]
        finally:
            for migrator in migrators:
                if migrator.poll() is None:
                    migrator.kill()
        for migrator, (stdout, stderr) in zip(migrators, outputs, strict=True):
            assert migrator.returncode == 0, stderr
            assert stdout.strip() == f"at revision {REVISION}"
        assert conn.execute("SELECT count(*) FROM portqueue.step_run").fetchone() == (1,)
        assert conn.execute(
            "SELECT indisvalid FROM pg_index WHERE indexrelid = %s::regclass",
            [f"portqueue.{INDEX}"]).fetchone() == (True,)
        assert schema_catalog(conn, "portqueue")["alembic_version"] == [(REVISION,)]
