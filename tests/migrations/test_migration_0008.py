"""Migration 0008: retention per outcome. The queue and job tables get
``retention_completed_ttl_seconds`` and ``retention_failed_ttl_seconds``
(NULL on the rows already there: those keep the retention they had), the
job table the pruner's two partial indexes; its downgrade removes them and
keeps every row."""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import pytest
from alembic import command

from portqueue.migrate import migrate, run_on_database
from tests.migrations.catalog import column_names, job_indexes

ROWS = """
INSERT INTO portqueue.queue (name, retention_ttl_seconds, retention_keep_failed)
VALUES ('q', 3600, 10);
INSERT INTO portqueue.job (id, queue, data, status, finished_at, retention_ttl_seconds) VALUES
    ('01900000-0000-7000-8000-000000000001', 'q', '{}', 'completed', now(), 60),
    ('01900000-0000-7000-8000-000000000002', 'q', '{}', 'failed', now(), NULL),
    ('01900000-0000-7000-8000-000000000003', 'q', '{}', 'pending', NULL, NULL)
"""
NEW_COLUMNS = {"retention_completed_ttl_seconds", "retention_failed_ttl_seconds"}
NEW_INDEXES = {"job_retention_completed_ttl_idx", "job_retention_failed_ttl_idx"}


def test_upgrade_adds_the_outcome_ttls_and_downgrade_removes_them(
    new_database: Callable[[str], str],
) -> None:
    dsn = new_database("retention_per_outcome")
    migrate(dsn, revision="0007")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(ROWS)
        migrate(dsn, revision="0008")
        assert column_names(conn, "job") >= NEW_COLUMNS
        assert column_names(conn, "queue") >= NEW_COLUMNS
        assert job_indexes(conn) >= NEW_INDEXES
        jobs = conn.execute(
            "SELECT retention_ttl_seconds, retention_completed_ttl_seconds, "
            "retention_failed_ttl_seconds FROM portqueue.job ORDER BY id").fetchall()
        assert jobs == [(60, None, None), (None, None, None), (None, None, None)]
        queue = conn.execute(
            "SELECT retention_ttl_seconds, retention_keep_failed, "
            "retention_completed_ttl_seconds, retention_failed_ttl_seconds "
            "FROM portqueue.queue").fetchone()
        assert queue == (3600, 10, None, None)
        # The queue's columns are checked like its others; the job's are not (0006).
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute("UPDATE portqueue.queue SET retention_failed_ttl_seconds = -1")

        run_on_database(dsn, "portqueue", lambda config: command.downgrade(config, "0007"))
        assert not NEW_COLUMNS & (column_names(conn, "job") | column_names(conn, "queue"))
        assert not NEW_INDEXES & job_indexes(conn)
        assert conn.execute("SELECT count(*) FROM portqueue.job").fetchone() == (3,)
        assert conn.execute(
            "SELECT retention_ttl_seconds FROM portqueue.queue").fetchone() == (3600,)
