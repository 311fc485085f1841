"""``tx=`` adapters: run portqueue's statements inside a caller's transaction.

Each adapter turns a caller's connection, session or ``atomic`` block into the
one thing portqueue needs, "execute this SQL with these values and give me the
rows", so every adapter is a few lines and all of them pass the same
conformance suite. portqueue never opens, commits or rolls back the caller's
transaction; the NOTIFY that wakes workers is part of it, so it is delivered
on commit only and never on rollback.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, overload

import psycopg
from psycopg import pq
from psycopg.types.datetime import TimestamptzLoader

from portqueue.driver import Rows, execute_async, execute_sync
from portqueue.errors import InvalidArgument
from portqueue.queries import Query


class SyncTx:
    """A caller's transaction, for ``PortQueue``."""

    def __init__(self, execute: Callable[[Query], Rows], source: str) -> None:
        self.execute = execute
        self.source = source

    def __repr__(self) -> str:
        return f"<SyncTx from {self.source}>"


class AsyncTx:
    """A caller's transaction, for ``AsyncPortQueue``."""

    def __init__(self, execute: Callable[[Query], Awaitable[Rows]], source: str) -> None:
        self.execute = execute
        self.source = source

    def __repr__(self) -> str:
        return f"<AsyncTx from {self.source}>"


def _require_transaction(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> None:
    # In autocommit mode outside `conn.transaction()` every statement commits on
    # its own: the job would exist even if the caller's later writes roll back.
    idle = conn.info.transaction_status == pq.TransactionStatus.IDLE
    if conn.autocommit and idle:
        raise InvalidArgument(
            "tx", "the psycopg connection is in autocommit mode outside a transaction; "
            "use `with conn.transaction():` or a non-autocommit connection"
        )


@overload
def from_psycopg(conn: psycopg.AsyncConnection[Any]) -> AsyncTx: ...


@overload
def from_psycopg(conn: psycopg.Connection[Any]) -> SyncTx: ...


def from_psycopg(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> SyncTx | AsyncTx:
    """Join the transaction of a psycopg 3 ``Connection`` (sync) or ``AsyncConnection``."""
    if isinstance(conn, psycopg.AsyncConnection):
        async_conn = conn

        async def execute_in_async(query: Query) -> Rows:
            _require_transaction(async_conn)
            return await execute_async(async_conn, query)

        return AsyncTx(execute_in_async, "psycopg.AsyncConnection")
    if isinstance(conn, psycopg.Connection):
        sync_conn = conn

        def execute_in_sync(query: Query) -> Rows:
            _require_transaction(sync_conn)
            return execute_sync(sync_conn, query)

        return SyncTx(execute_in_sync, "psycopg.Connection")
    raise InvalidArgument("tx", f"from_psycopg() needs a psycopg 3 connection, got {type(conn)!r}")


def _mappings(result: Any) -> Rows:
    return [dict(row) for row in result.mappings()] if result.returns_rows else []


def _check_paramstyle(dialect: Any) -> None:
    # Our SQL uses %(name)s placeholders; the driver must understand them.
    if dialect.paramstyle != "pyformat":
        raise InvalidArgument(
            "tx", f"from_sqlalchemy() needs a pyformat driver such as psycopg or psycopg2, "
            f"not {dialect.driver!r}"
        )


def _require_sqlalchemy_transaction(driver_connection: Any) -> None:
    # With isolation_level="AUTOCOMMIT" SQLAlchemy's begin/commit/rollback never
    # reach the server: each statement commits on its own, so the job would
    # survive the caller's rollback. (`info` is psycopg 3's and psycopg2's.)
    info = getattr(driver_connection, "info", None)
    idle = info is None or info.transaction_status == pq.TransactionStatus.IDLE
    if getattr(driver_connection, "autocommit", False) and idle:
        raise InvalidArgument(
            "tx", "the SQLAlchemy connection runs with isolation_level='AUTOCOMMIT', where "
            "each statement commits on its own; use a connection or session without it"
        )


def from_sqlalchemy(session_or_connection: Any) -> SyncTx | AsyncTx:
    """Join the transaction of a SQLAlchemy ``Session``, ``Connection``, ``AsyncSession`` or
    ``AsyncConnection`` (psycopg or psycopg2 driver)."""
    from sqlalchemy.engine import Connection
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
    from sqlalchemy.orm import Session

    target = session_or_connection
    if isinstance(target, (Session, Connection)):

        def execute_in_sync(query: Query) -> Rows:
            conn = target.connection() if isinstance(target, Session) else target
            _check_paramstyle(conn.dialect)
            _require_sqlalchemy_transaction(conn.connection.driver_connection)
            return _mappings(conn.exec_driver_sql(query.sql, dict(query.params)))

        return SyncTx(execute_in_sync, f"sqlalchemy {type(target).__name__}")
    if isinstance(target, (AsyncSession, AsyncConnection)):

        async def execute_in_async(query: Query) -> Rows:
            conn = await target.connection() if isinstance(target, AsyncSession) else target
            _check_paramstyle(conn.dialect)
            _require_sqlalchemy_transaction((await conn.get_raw_connection()).driver_connection)
            return _mappings(await conn.exec_driver_sql(query.sql, dict(query.params)))

        return AsyncTx(execute_in_async, f"sqlalchemy {type(target).__name__}")
    raise InvalidArgument(
        "tx", f"from_sqlalchemy() needs a Session, Connection, AsyncSession or AsyncConnection, "
        f"got {type(target)!r}"
    )


def from_django(using: str = "default") -> SyncTx:
    """Join the current ``transaction.atomic()`` block of Django database ``using``."""
    from django.db import connections
    from django.utils.connection import ConnectionDoesNotExist

    try:
        connection = connections[using]
    except ConnectionDoesNotExist:
        raise InvalidArgument("using", f"no database {using!r} in settings.DATABASES") from None

    def execute_in_atomic(query: Query) -> Rows:
        # Outside atomic() Django autocommits each statement, so the job would
        # not share the fate of the caller's writes.
        if not connection.in_atomic_block:
            raise InvalidArgument("tx", "from_django() must be used inside transaction.atomic()")
        with connection.cursor() as cursor:
            # With USE_TZ=False Django loads timestamptz as naive datetimes in
            # its TIME_ZONE, which portqueue would read as the process's local
            # time: results and schedules' next_run_at came out hours off. This
            # cursor loads them aware, as psycopg does. (Django picks psycopg 3,
            # which portqueue requires, over psycopg2; `adapters` is psycopg 3's.)
            adapters = getattr(cursor.cursor, "adapters", None)
            if adapters is not None:
                adapters.register_loader("timestamptz", TimestamptzLoader)
            cursor.execute(query.sql, dict(query.params))
            if cursor.description is None:
                return []
            names = [column[0] for column in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    return SyncTx(execute_in_atomic, f"django {using!r}")
