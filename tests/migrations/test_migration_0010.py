"""Migration 0010 (workflows): on a schema with jobs in it, the upgrade adds
the waiting status, the dependency and flow columns, the subscription table
and the trigger that settles dependents, and leaves existing jobs as they
were (no dependencies, claimed as before); the downgrade refuses while a job
waits, and otherwise removes what the upgrade added."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from alembic import command

from portqueue import PortQueue
from portqueue.migrate import migrate, run_on_database

JOBS = """
INSERT INTO portqueue.job (id, queue, data, status, finished_at) VALUES
    ('01900000-0000-7000-8000-000000000001', 'q', '{}', 'completed', now()),
    ('01900000-0000-7000-8000-000000000002', 'q', '{}', 'pending', NULL)
"""


def columns(conn: psycopg.Connection[Any]) -> set[str]:
    rows = conn.execute("SELECT attname FROM pg_attribute WHERE attnum > 0 "
                        "AND NOT attisdropped AND attrelid = 'portqueue.job'::regclass")
    return {name for (name,) in rows.fetchall()}


def tables(conn: psycopg.Connection[Any]) -> set[str]:
    rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'portqueue'")
    return {name for (name,) in rows.fetchall()}


def downgrade(dsn: str) -> None:
    run_on_database(dsn, "portqueue", lambda config: command.downgrade(config, "0009"))


def test_upgrade_keeps_existing_jobs_and_downgrade_refuses_while_a_job_waits(
    new_database: Callable[[str], str],
) -> None:
    dsn = new_database("workflows")
    migrate(dsn, revision="0009")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(JOBS)
        migrate(dsn, revision="0010")
        added = {"depends_on", "on_dependency_failure", "has_dependents", "flow_id", "flow_key"}
        assert added <= columns(conn)
        assert "subscription" in tables(conn)
        rows = conn.execute("SELECT status::text, depends_on, has_dependents FROM portqueue.job "
                            "ORDER BY id").fetchall()
        assert rows == [("completed", None, False), ("pending", None, False)]

        with PortQueue(dsn) as pq:
            waiting = pq.add_job(queue="q", data=1,
                                 depends_on=["01900000-0000-7000-8000-000000000002"])
            assert waiting.status is not None and waiting.status.value == "waiting"
            with pytest.raises(Exception, match="still waiting"):  # SQLAlchemy wraps it
                downgrade(dsn)
            assert "depends_on" in columns(conn)
            assert pq.cancel_job(job_id=waiting.job_id).outcome.value == "cancelled"  # type: ignore[arg-type]

        downgrade(dsn)
        assert not added & columns(conn)
        assert "subscription" not in tables(conn)
        assert conn.execute("SELECT count(*) FROM portqueue.job").fetchone() == (3,)
        triggers = conn.execute("SELECT tgname FROM pg_trigger WHERE tgname LIKE '%settle%'")
        assert triggers.fetchall() == []
        migrate(dsn)  # and up again, with 'waiting' already in the enum
        assert added <= columns(conn)
