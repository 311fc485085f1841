"""Migration 0018 (the freed slot's wake-up once per queue): the trigger
job_slot_freed_notify fires only for a limited job that leaves ``active`` with
its flag on, so a completion that turned the flag off (and notified itself)
sends nothing from it; the downgrade restores 0017's trigger."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
from alembic import command

from portqueue.migrate import migrate, run_on_database

ACTIVE = """
INSERT INTO portqueue.job (id, queue, data, status, started_at, lease_token, lease_expires_at,
                           limited)
VALUES (%s, 'q', '{}', 'active', now(), 1, now() + interval '1 minute', true)
"""


def wakes(conn: psycopg.Connection[Any], listener: psycopg.Connection[Any],
          flag_after: bool) -> list[str]:
    """Complete one limited active job, its flag set to ``flag_after`` by the
    same UPDATE; the notifications the trigger sent."""
    job_id = conn.execute("SELECT gen_random_uuid()").fetchone()[0]  # type: ignore[index]
    conn.execute(ACTIVE, [job_id])
    conn.execute("UPDATE portqueue.job SET status = 'completed', finished_at = now(), "
                 "lease_expires_at = NULL, limited = %s WHERE id = %s", [flag_after, job_id])
    return [n.payload for n in listener.notifies(timeout=0.5, stop_after=1)]


def test_upgrade_lets_a_completion_that_turned_the_flag_off_skip_the_trigger(
    new_database: Callable[[str], str],
) -> None:
    dsn = new_database("slot_freed_once")
    migrate(dsn, revision="0017")
    with psycopg.connect(dsn, autocommit=True) as conn, \
            psycopg.connect(dsn, autocommit=True) as listener:
        listener.execute('LISTEN "portqueue.job"')
        assert wakes(conn, listener, flag_after=False) == ["q"], "0017: every limited job"
        migrate(dsn, revision="0018")
        assert wakes(conn, listener, flag_after=False) == [], "the statement notified itself"
        assert wakes(conn, listener, flag_after=True) == ["q"], "any other way a job ends"
        run_on_database(dsn, "portqueue", lambda config: command.downgrade(config, "0017"))
        assert wakes(conn, listener, flag_after=False) == ["q"]
