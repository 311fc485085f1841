"""Migrations serialise on a per-schema advisory lock: deploys can race safely."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from sqlalchemy.exc import OperationalError

from portqueue.migrate import _lock_key, head_revision, migrate
from tests.migrations.catalog import EXPECTED_TABLES, schema_catalog, tables
from tests.migrations.conftest import cli_command, cli_env

HEAD = head_revision()

PROCESSES = 5


def _waiting_on_advisory_lock(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        """
        SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
        WHERE l.locktype = 'advisory' AND NOT l.granted
          AND a.datname = current_database() AND a.application_name = 'portqueue:migrate'
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
        # second still migrates, and the first waits (here: times out).
        conn.execute("SELECT pg_advisory_lock(%s)", [_lock_key("portqueue")])
        try:
            migrate(make_conninfo(dsn, options="-c lock_timeout=10s"), schema="pq_second")
            with pytest.raises(OperationalError, match="lock timeout"):
                migrate(make_conninfo(dsn, options="-c lock_timeout=200ms"), schema="portqueue")
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", [_lock_key("portqueue")])

        # Dropping one schema leaves the other whole; migrating rebuilds it.
        conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier("portqueue")))
        assert schema_catalog(conn, "pq_second") == second
        migrate(dsn, schema="portqueue")
        assert schema_catalog(conn, "portqueue") == first
