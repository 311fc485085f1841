"""Migration 0007: the job's ``error`` column, filled for the jobs that already
have errors, and the index of dead-letter sources; its downgrade removes both."""

from __future__ import annotations

from collections.abc import Callable

import psycopg
from alembic import command

from portqueue.migrate import migrate, run_on_database
from tests.migrations.catalog import column_names, job_indexes

JOBS = """
INSERT INTO portqueue.job (id, queue, data, status, finished_at, errors) VALUES
    ('01900000-0000-7000-8000-000000000001', 'q', '{}', 'failed', now(),
     '[{"message": "first"}, {"message": "newest", "type": "Boom"}]'),
    ('01900000-0000-7000-8000-000000000002', 'q', '{}', 'pending', NULL, '[]'),
    -- hand-written oddities: no message, not objects, not an array
    ('01900000-0000-7000-8000-000000000003', 'q', '{}', 'failed', now(), '[{"type": "X"}]'),
    ('01900000-0000-7000-8000-000000000004', 'q', '{}', 'failed', now(), '["text"]'),
    ('01900000-0000-7000-8000-000000000005', 'q', '{}', 'failed', now(), '{"message": "x"}')
"""


def test_upgrade_fills_error_for_existing_jobs_and_downgrade_removes_it(
    new_database: Callable[[str], str],
) -> None:
    dsn = new_database("error_column")
    migrate(dsn, revision="0006")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(JOBS)
        migrate(dsn, revision="0007")
        rows = conn.execute("SELECT id::text, error FROM portqueue.job ORDER BY id").fetchall()
        assert [error for _, error in rows] == ["newest", None, None, None, None]
        failed = conn.execute(
            "SELECT id, error FROM portqueue.job WHERE status = 'failed'").fetchall()
        assert len(failed) == 4
        assert "job_source_job_idx" in job_indexes(conn)

        run_on_database(dsn, "portqueue", lambda config: command.downgrade(config, "0006"))
        assert "error" not in column_names(conn)
        assert "job_source_job_idx" not in job_indexes(conn)
        assert conn.execute("SELECT count(*) FROM portqueue.job").fetchone() == (5,)
