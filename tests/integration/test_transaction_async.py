"""driver.transaction_async, the refill's and the limited claim's write: its
statements go in one pipeline with no BEGIN or COMMIT, and the server runs
them as one implicit transaction, committed at the pipeline's Sync. What
the limited claim counts on: one transaction (the queue row's lock is held
to its end), and nothing of it kept when a statement fails."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest
from psycopg import sql

from portqueue.driver import AsyncCursorKeepingConnection, transaction_async
from portqueue.queries import Query


def q(text: str, **params: Any) -> tuple[Query, None]:
    return Query("test", text, params), None


async def test_its_statements_are_one_transaction(pg_dsn: str) -> None:
    async with await AsyncCursorKeepingConnection.connect(pg_dsn, autocommit=True) as conn:
        first, second = await transaction_async(conn, [
            q("SELECT pg_current_xact_id()::text AS x"),
            q("SELECT pg_current_xact_id()::text AS x, now() = statement_timestamp() AS t")])
        assert first[0]["x"] == second[0]["x"]
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


async def test_a_failed_statement_keeps_nothing_of_the_others(pg_dsn: str, schema: str) -> None:
    table = sql.Identifier(schema, f"kept_{uuid.uuid4().hex}")
    async with await AsyncCursorKeepingConnection.connect(pg_dsn, autocommit=True) as conn:
        # A table of its own, not a temporary one: through PgBouncer in
        # transaction mode, each transaction may run on another session.
        await conn.execute(sql.SQL("CREATE TABLE {} (n integer)").format(table))
        try:
            insert = sql.SQL("INSERT INTO {} VALUES (%(n)s)").format(table).as_string(conn)
            with pytest.raises(psycopg.errors.DivisionByZero):
                await transaction_async(conn, [
                    q(insert, n=1), q("SELECT 1 / %(zero)s", zero=0), q(insert, n=2)])
            # The session is usable at once: no aborted transaction left open.
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            count = sql.SQL("SELECT count(*) AS n FROM {}").format(table).as_string(conn)
            (rows,) = await transaction_async(conn, [q(count)])
            assert rows == [{"n": 0}]
        finally:
            await conn.execute(sql.SQL("DROP TABLE {}").format(table))


async def test_it_refuses_a_session_in_a_transaction(pg_dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(pg_dsn) as conn:
        with pytest.raises(RuntimeError, match="autocommit"):
            await transaction_async(conn, [q("SELECT 1")])
