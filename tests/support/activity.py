"""What pg_stat_activity shows of the code under test: sessions waiting on a
lock (races made real, not hoped for), handler connections of a worker."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql


def waiting_on_locks(db: psycopg.Connection[Any], application_name: str) -> int:
    """Sessions named ``application_name`` waiting on a lock now."""
    row = db.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
                     "AND wait_event_type = 'Lock'", [application_name]).fetchone()
    assert row is not None
    return int(row[0])


def handler_connections(db: psycopg.Connection[Any], state: str = "%") -> int:
    """Handler connections (``job.transaction()``) of this database in ``state``."""
    row = db.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND application_name LIKE '%%:handler' AND state LIKE %s", [state]).fetchone()
    assert row is not None
    return int(row[0])


def listening_for_jobs(db: psycopg.Connection[Any], schema: str) -> list[str]:
    """The workers whose listener subscribed to the job channel, by
    application_name (its last statement: LISTEN on the job channel follows
    the cancel channel's, and a health check then runs SELECT 1)."""
    channel = sql.Identifier(f"{schema}.job").as_string(db)
    rows = db.execute("SELECT application_name, query FROM pg_stat_activity "
                      "WHERE application_name LIKE 'share%%:listener'").fetchall()
    return sorted(name for name, query in rows if query == f"LISTEN {channel}")
