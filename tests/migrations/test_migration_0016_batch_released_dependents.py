"""Migration 0016 (dependents_released): on a schema with dependents waiting
in it, the upgrade keeps every row (the flag off), a completion by a worker's
batch then releases its dependents without the row trigger, any other status
change still settles them through it, and the downgrade drops the column and
brings back 0010's trigger condition, with which dependents settle as before."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import psycopg
from alembic import command

from portqueue import PortQueue
from portqueue import worker_operations as ops
from portqueue.migrate import migrate, run_on_database
from portqueue.queries import queries_for
from tests.integration.test_batch_release import claim
from tests.support.rows import finish, job_row

Db = psycopg.Connection[Any]


def columns(conn: Db) -> set[str]:
    rows = conn.execute("SELECT column_name FROM information_schema.columns "
                        "WHERE table_schema = 'portqueue' AND table_name = 'job'")
    return {name for (name,) in rows.fetchall()}


def chain(pq: PortQueue, queue: str) -> tuple[str, str]:
    parent = pq.add_job(queue=queue, data=1).job_id
    assert parent is not None
    child = pq.add_job(queue=queue + "-child", data=2, depends_on=[parent]).job_id
    assert child is not None
    return parent, child


def settle_calls(conn: Db, statement: str, params: dict[str, Any]) -> int:
    with conn.transaction():
        conn.execute("SET LOCAL track_functions = 'all'")
        conn.execute(statement, params)
        row = conn.execute("SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions "
                           "WHERE schemaname = 'portqueue' AND funcname = 'settle_dependents'"
                           ).fetchone()
    assert row is not None
    return int(row[0])


def test_upgrade_adds_the_flag_and_downgrade_restores_the_trigger(
    new_database: Callable[[str], str],
) -> None:
    dsn = new_database("released_flag")
    migrate(dsn, revision="0015")
    with psycopg.connect(dsn, autocommit=True) as conn, PortQueue(dsn) as pq:
        before_parent, before_child = chain(pq, "before")
        migrate(dsn, revision="0016")
        assert "dependents_released" in columns(conn)
        assert job_row(conn, "portqueue", before_parent)["dependents_released"] is False
        assert job_row(conn, "portqueue", before_child)["status"] == "waiting"
        # Any status change but the batch's: the trigger settles, as before.
        finish(conn, "portqueue", before_parent, "completed")
        assert job_row(conn, "portqueue", before_child)["status"] == "pending"

        parent, child = chain(pq, "batch")
        (row,) = claim(conn, "portqueue", "batch", 1)
        query = ops.complete_jobs(queries_for("portqueue"), [json.dumps(
            {"id": parent, "lease_token": row["lease_token"], "status": "completed",
             "output": None})])
        assert settle_calls(conn, query.sql, dict(query.params)) == 0
        assert job_row(conn, "portqueue", child)["status"] == "pending"
        assert job_row(conn, "portqueue", parent)["dependents_released"] is True

        run_on_database(dsn, "portqueue", lambda config: command.downgrade(config, "0015"))
        assert "dependents_released" not in columns(conn)
        assert conn.execute("SELECT count(*) FROM portqueue.job").fetchone() == (4,)
        parent, child = chain(pq, "downgraded")
        assert settle_calls(conn, "UPDATE portqueue.job SET status = 'completed', "
                            "finished_at = now() WHERE id = %(id)s", {"id": parent}) == 1
        assert job_row(conn, "portqueue", child)["status"] == "pending"
        migrate(dsn)
        assert "dependents_released" in columns(conn)
