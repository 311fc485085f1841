"""Arranging and asserting with plain SQL, and a caller's own transaction for either client.

The producing/managing/reading tests read what portqueue wrote straight from
the tables (never through the API under test) and put rows into states the API
cannot reach yet (active, finished) with test-written UPDATEs.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from portqueue import PortQueue
from portqueue.tx import AsyncTx, SyncTx, from_psycopg


def db_now(db: psycopg.Connection[Any]) -> datetime:
    """The database clock (a new transaction per call on the autocommit ``db``)."""
    row = db.execute("SELECT now()").fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


def fetch_one(
    db: psycopg.Connection[Any], schema: str, table: str, where: str, params: Any = None
) -> dict[str, Any] | None:
    query = sql.SQL("SELECT * FROM {} WHERE ").format(sql.Identifier(schema, table)) + sql.SQL(
        where)
    with db.cursor(row_factory=dict_row) as cursor:
        cursor.execute(query, params)
        return cursor.fetchone()


def job_row(db: psycopg.Connection[Any], schema: str, job_id: str) -> dict[str, Any]:
    row = fetch_one(db, schema, "job", "id = %s", [job_id])
    assert row is not None, f"job {job_id} is not in the table"
    return row


def schedule_row(
    db: psycopg.Connection[Any], schema: str, schedule_id: str | None
) -> dict[str, Any]:
    # None is accepted (a result's optional id) and fails as a missing row.
    row = fetch_one(db, schema, "schedule", "id = %s", [schedule_id])
    assert row is not None, f"schedule {schedule_id} is not in the table"
    return row


def queue_row(db: psycopg.Connection[Any], schema: str, queue: str) -> dict[str, Any] | None:
    return fetch_one(db, schema, "queue", "name = %s", [queue])


def count_jobs(db: psycopg.Connection[Any], schema: str, where: str = "true") -> int:
    """Rows in the job table matching a literal, test-written condition."""
    return count_rows(db, schema, "job", where)


def count_rows(
    db: psycopg.Connection[Any], schema: str, table: str, where: str = "true", params: Any = None
) -> int:
    query = sql.SQL("SELECT count(*) FROM {} WHERE ").format(
        sql.Identifier(schema, table)) + sql.SQL(where)
    row = db.execute(query, params).fetchone()
    assert row is not None
    return int(row[0])


def update_job(
    db: psycopg.Connection[Any], schema: str, job_id: str, assignments: str
) -> None:
    """``UPDATE job SET <assignments>`` for one job (literal, test-written SQL)."""
    query = (sql.SQL("UPDATE {} SET ").format(sql.Identifier(schema, "job"))
             + sql.SQL(assignments) + sql.SQL(" WHERE id = %s"))
    result = db.execute(query, [job_id])
    assert result.rowcount == 1, f"job {job_id} was not updated"


ACTIVE = (
    "status = 'active', attempt = 1, lease_token = 1, "
    "lease_expires_at = now() + interval '1 min', started_at = now()"
)


def make_active(db: psycopg.Connection[Any], schema: str, job_id: str) -> None:
    """What a claim does to a row, short of a worker (which comes with a later issue)."""
    update_job(db, schema, job_id, ACTIVE)


def finish(db: psycopg.Connection[Any], schema: str, job_id: str, status: str) -> None:
    assert status in ("completed", "failed", "cancelled", "expired")
    update_job(db, schema, job_id, f"status = '{status}', finished_at = now()")


def set_queue(db: psycopg.Connection[Any], schema: str, queue: str, assignments: str) -> None:
    """``UPDATE queue SET <assignments>`` (constant SQL) on ``queue``'s row, made if missing."""
    db.execute(sql.SQL("INSERT INTO {} (name) VALUES (%s) ON CONFLICT DO NOTHING").format(
        sql.Identifier(schema, "queue")), [queue])
    db.execute(sql.SQL("UPDATE {} SET ").format(sql.Identifier(schema, "queue"))
               + sql.SQL(assignments) + sql.SQL(" WHERE name = %s"), [queue])


def set_dead_letter_queue(
    db: psycopg.Connection[Any], schema: str, queue: str, dead_letter_queue: str
) -> None:
    """What a worker declaring ``dead_letter_queue=`` writes on ``queue``'s row when it starts."""
    db.execute(sql.SQL(
        "INSERT INTO {} (name, dead_letter_queue) VALUES (%s, %s) ON CONFLICT (name) "
        "DO UPDATE SET dead_letter_queue = excluded.dead_letter_queue").format(
        sql.Identifier(schema, "queue")), [queue, dead_letter_queue])


def is_async(client: Any) -> bool:
    return not isinstance(client, PortQueue)


class CallerTx:
    """A caller's own psycopg connection in a transaction, for whichever client runs the test.

    For PortQueue it is a sync ``Connection``; for the async client (driven by
    tests.support.clients.BlockingAsyncClient) an ``AsyncConnection`` on that
    client's event loop. ``tx`` is what the test passes as ``tx=``.
    """

    def __init__(self, client: Any, dsn: str, **connect_kwargs: Any) -> None:
        self.client = client
        self.is_async = is_async(client)
        if self.is_async:
            self.conn: Any = client.run(psycopg.AsyncConnection.connect(dsn, **connect_kwargs))
        else:
            self.conn = psycopg.connect(dsn, **connect_kwargs)
        self.tx: SyncTx | AsyncTx = from_psycopg(self.conn)

    def _wait(self, value: Any) -> Any:
        return self.client.run(value) if self.is_async else value

    def execute(self, query: Any, params: Any = None) -> list[tuple[Any, ...]]:
        if self.is_async:

            async def run() -> list[tuple[Any, ...]]:
                cursor = await self.conn.execute(query, params)
                return await cursor.fetchall() if cursor.description else []

            return self.client.run(run())  # type: ignore[no-any-return]
        cursor = self.conn.execute(query, params)
        return cursor.fetchall() if cursor.description else []

    def commit(self) -> None:
        self._wait(self.conn.commit())

    def rollback(self) -> None:
        self._wait(self.conn.rollback())

    def close(self) -> None:
        self._wait(self.conn.close())

    def __enter__(self) -> CallerTx:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def assert_utc(value: datetime | None) -> None:
    """``value`` is an aware datetime in UTC (what every API datetime must be)."""
    assert value is not None
    assert value.tzinfo is not None and value.utcoffset() == timedelta(0)


def spawned_jobs(
    db: psycopg.Connection[Any], schema: str, schedule_id: str
) -> list[dict[str, Any]]:
    """The jobs a schedule spawned, in tick order."""
    query = sql.SQL("SELECT * FROM {} WHERE schedule_id = %s ORDER BY scheduled_for").format(
        sql.Identifier(schema, "job"))
    with db.cursor(row_factory=dict_row) as cursor:
        cursor.execute(query, [schedule_id])
        return cursor.fetchall()


def insert_pending(db: psycopg.Connection[Any], schema: str, queue: str, count: int,
                   priority: int, **column: str) -> None:
    """``count`` pending jobs of ``queue`` in one statement (``{"n": 1..count}`` as data),
    each ``column`` set to its text value, without a NOTIFY per row: the claim-plan
    tests' backlogs. Run inside the caller's transaction."""
    names = list(column)
    db.execute("SET LOCAL session_replication_role = replica")
    db.execute(sql.SQL(
        "INSERT INTO {} (id, queue, data, priority{}) "
        "SELECT gen_random_uuid(), %s, jsonb_build_object('n', n), %s{} "
        "FROM generate_series(1, %s) AS n").format(
        sql.Identifier(schema, "job"),
        sql.SQL("").join(sql.SQL(", ") + sql.Identifier(name) for name in names),
        sql.SQL("").join(sql.SQL(", ") + sql.Placeholder() for _ in names)),
        [queue, priority, *column.values(), count])
