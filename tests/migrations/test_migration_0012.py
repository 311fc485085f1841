"""Migration 0012 (flow control's upkeep): a changed limit notifies the queue's
channel, an unchanged one does not, ended throttle windows have their index;
existing rows keep their values, and the downgrade removes all of it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
from alembic import command

from portqueue.migrate import migrate, run_on_database

ROWS = """
INSERT INTO portqueue.queue (name, global_concurrency) VALUES ('q', 3);
INSERT INTO portqueue.throttle_window (queue, key, job_id, window_ends_at) VALUES
    ('q', 'k', '01900000-0000-7000-8000-000000000001', now() - interval '1 s')
"""


def names(conn: psycopg.Connection[Any], query: str) -> set[str]:
    return {name for (name,) in conn.execute(query).fetchall()}


def wake_ups(dsn: str, statement: str) -> list[str]:
    """The payloads on the job channel after ``statement`` commits."""
    with psycopg.connect(dsn, autocommit=True) as listener, \
            psycopg.connect(dsn, autocommit=True) as writer:
        listener.execute('LISTEN "portqueue.job"')
        writer.execute(statement)
        writer.execute("SELECT pg_notify('portqueue.job', 'end')")
        payloads = []
        for notify in listener.notifies(timeout=10):
            if notify.payload == "end":
                break
            payloads.append(notify.payload)
        return payloads


def test_upgrade_notifies_changed_limits_and_downgrade_removes_it(
    new_database: Callable[[str], str],
) -> None:
    dsn = new_database("flow_control_upkeep")
    migrate(dsn, revision="0011")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(ROWS)
        migrate(dsn, revision="0012")
        assert conn.execute("SELECT name, global_concurrency FROM portqueue.queue"
                            ).fetchall() == [("q", 3)]
        assert conn.execute("SELECT key FROM portqueue.throttle_window").fetchall() == [("k",)]
        assert "throttle_window_ends_idx" in names(
            conn, "SELECT indexname FROM pg_indexes WHERE tablename = 'throttle_window'")
        assert wake_ups(dsn, "UPDATE portqueue.queue SET global_concurrency = 5") == ["q"]
        assert wake_ups(dsn, "UPDATE portqueue.queue SET global_concurrency = 5, "
                             "concurrency = 2") == [], "no limit changed"

        run_on_database(dsn, "portqueue", lambda config: command.downgrade(config, "0011"))
        assert wake_ups(dsn, "UPDATE portqueue.queue SET global_concurrency = 7") == []
        assert "throttle_window_ends_idx" not in names(
            conn, "SELECT indexname FROM pg_indexes WHERE tablename = 'throttle_window'")
        assert conn.execute("SELECT global_concurrency FROM portqueue.queue").fetchone() == (7,)
        assert conn.execute("SELECT count(*) FROM portqueue.throttle_window").fetchone() == (1,)
