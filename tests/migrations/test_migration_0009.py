"""Migration 0009 (flow control): the queue's limit columns, the job's partition and
debounce keys, the partial indexes and tables the limited claim uses; existing rows
keep their values, and the downgrade removes all of it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
from alembic import command

from portqueue.migrate import migrate, run_on_database

ROWS = """
INSERT INTO portqueue.queue (name, concurrency) VALUES ('q', 3);
INSERT INTO portqueue.job (id, queue, data) VALUES
    ('01900000-0000-7000-8000-000000000001', 'q', '{"n": 1}'),
    ('01900000-0000-7000-8000-000000000002', 'q', '{"n": 2}')
"""


def names(conn: psycopg.Connection[Any], query: str) -> set[str]:
    return {name for (name,) in conn.execute(query).fetchall()}


def job_columns(conn: psycopg.Connection[Any]) -> set[str]:
    return names(conn, "SELECT attname FROM pg_attribute WHERE attnum > 0 "
                       "AND NOT attisdropped AND attrelid = 'portqueue.job'::regclass")


def tables(conn: psycopg.Connection[Any]) -> set[str]:
    return names(conn, "SELECT tablename FROM pg_tables WHERE schemaname = 'portqueue'")


def test_upgrade_keeps_rows_and_downgrade_removes_flow_control(
    new_database: Callable[[str], str],
) -> None:
    dsn = new_database("flow_control")
    migrate(dsn, revision="0008")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(ROWS)
        migrate(dsn, revision="0009")
        queue = conn.execute(
            "SELECT concurrency, global_concurrency, partition_concurrency, rate_limit "
            "FROM portqueue.queue").fetchall()
        assert queue == [(3, None, None, None)]
        jobs = conn.execute("SELECT data ->> 'n', partition_key, debounce_key, limited "
                            "FROM portqueue.job ORDER BY id").fetchall()
        assert jobs == [("1", None, None, False), ("2", None, None, False)]
        assert {"queue_start", "throttle_window"} <= tables(conn)
        indexes = names(conn, "SELECT indexname FROM pg_indexes WHERE tablename = 'job'")
        assert {"job_partition_idx", "job_limited_active_idx", "job_debounce_key_uq"} <= indexes
        # A rate is both of its columns or neither.
        try:
            conn.execute("UPDATE portqueue.queue SET rate_limit = 5")
        except psycopg.errors.CheckViolation:
            pass
        else:
            raise AssertionError("a rate limit without its period was accepted")

        run_on_database(dsn, "portqueue", lambda config: command.downgrade(config, "0008"))
        assert not {"partition_key", "debounce_key", "limited"} & job_columns(conn)
        assert not {"queue_start", "throttle_window"} & tables(conn)
        assert conn.execute("SELECT count(*) FROM portqueue.job").fetchone() == (2,)
        assert conn.execute("SELECT concurrency FROM portqueue.queue").fetchone() == (3,)
