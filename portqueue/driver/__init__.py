"""The private executor seam: run an operation's statements on a connection.

Operations (``portqueue.operations``) are generators that yield a ``Query`` and
receive its rows; they hold all behaviour and do no I/O. The runners below
drive them on a sync or an async executor, so ``PortQueue`` and
``AsyncPortQueue`` (and every ``tx=`` adapter) share one implementation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Generator, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg import pq
from psycopg.rows import AsyncRowFactory, RowMaker

from portqueue.queries import Batch, Query

T = TypeVar("T")
R = TypeVar("R")
Rows = list[dict[str, Any]]
Operation = Generator[Query | Batch, Rows, T]


def run_sync(
    operation: Operation[T],
    query: Query | Batch,
    execute: Callable[[Query], Rows],
    pipelined: Callable[[Batch], Rows] | None = None,
) -> T:
    """Drive ``operation`` from its first ``query`` (already taken) to its result.

    A ``Batch`` goes to ``pipelined`` if given, else its statements run in
    turn. A database error is thrown into the operation, which may handle it
    (after rolling back to a savepoint of its own) or let it propagate."""
    try:
        while True:
            try:
                if isinstance(query, Query):
                    rows = execute(query)
                elif pipelined is not None:
                    rows = pipelined(query)
                else:
                    rows = [row for each in query.queries for row in execute(each)]
            except Exception as error:
                query = operation.throw(error)
            else:
                query = operation.send(rows)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


async def run_async(
    operation: Operation[T],
    query: Query | Batch,
    execute: Callable[[Query], Awaitable[Rows]],
    pipelined: Callable[[Batch], Awaitable[Rows]] | None = None,
) -> T:
    """Drive ``operation`` from its first ``query`` (already taken) to its result."""
    try:
        while True:
            try:
                if isinstance(query, Query):
                    rows = await execute(query)
                elif pipelined is not None:
                    rows = await pipelined(query)
                else:
                    rows = [row for each in query.queries for row in await execute(each)]
            except Exception as error:
                query = operation.throw(error)
            else:
                query = operation.send(rows)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


# A statement that meets a row another transaction just moved to another
# partition of a partitioned table fails with SQLSTATE 40001 ("tuple to be
# locked was already moved to another partition due to concurrent update")
# where the single table would re-check the new row version and match
# nothing (docs/retention.md, point 3). A statement that ran as a
# transaction of its own rolled back whole, so running it again is what its
# caller would do; its retry sees the moved row, as the single table would
# have. The same holds for a serialization failure under a stricter default
# isolation. Inside a transaction (a tx= of the caller's, or several
# statements) the transaction is aborted and nothing is retried here.
SERIALIZATION_FAILURE = "40001"
MOVED_ROW_ATTEMPTS = 5


def _own_transaction(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    return conn.autocommit and conn.info.transaction_status == pq.TransactionStatus.IDLE


def execute_sync(conn: psycopg.Connection[Any], query: Query) -> Rows:
    cursor: psycopg.Cursor[dict[str, Any]] = _cursor(conn, query, _dict_rows)
    attempts = MOVED_ROW_ATTEMPTS if _own_transaction(conn) else 1
    for attempt in range(1, attempts + 1):
        try:
            cursor.execute(*_bound(cursor, query))
        except psycopg.errors.SerializationFailure:
            if attempt == attempts:
                raise
        else:
            break
    return cursor.fetchall() if _has_rows(cursor) else []


async def execute_async(conn: psycopg.AsyncConnection[Any], query: Query) -> Rows:
    return await fetch_async(conn, query, _dict_rows)


# A batch's statements go in pipeline mode, each on a cursor of its own (a
# kept cursor would hold only the last one's rows); leaving the pipeline
# sends the Sync and collects every result, raising the first error.


def pipeline_sync(conn: psycopg.Connection[Any], batch: Batch) -> Rows:
    cursors: list[psycopg.Cursor[dict[str, Any]]] = []
    with conn.pipeline():
        for query in batch.queries:
            cursor = _new_cursor(conn, query, _dict_rows)
            cursor.execute(*_bound(cursor, query))
            cursors.append(cursor)
    return [row for cursor in cursors if _has_rows(cursor) for row in cursor.fetchall()]


async def pipeline_async(conn: psycopg.AsyncConnection[Any], batch: Batch) -> Rows:
    cursors: list[psycopg.AsyncCursor[dict[str, Any]]] = []
    async with conn.pipeline():
        for query in batch.queries:
            cursor = _new_cursor(conn, query, _dict_rows)
            await cursor.execute(*_bound(cursor, query))
            cursors.append(cursor)
    return [row for cursor in cursors if _has_rows(cursor)
            for row in await cursor.fetchall()]


async def transaction_async(conn: psycopg.AsyncConnection[Any],
                            queries: Sequence[tuple[Query, AsyncRowFactory[Any] | None]],
                            ) -> list[list[Any]]:
    """Each query in one transaction and one round trip, each one's rows
    built by its row factory (``None``: dicts). The server still runs them in
    turn. On an error nothing of them is kept and the error is raised.

    ``conn`` is in autocommit: the statements go in pipeline mode with no
    BEGIN or COMMIT, and the server runs the statements before the pipeline's
    one Sync as one implicit transaction, committed at the Sync, rolled back
    whole (the statements after the failed one skipped) on an error. That is
    the transaction BEGIN … COMMIT would be, for a third less client time
    than psycopg's transaction block in a pipeline (measured:
    docs/performance.md, "limited")."""
    if not conn.autocommit:
        raise RuntimeError("transaction_async needs an autocommit connection")
    cursors: list[psycopg.AsyncCursor[Any]] = []
    async with conn.pipeline():
        for query, row_factory in queries:
            cursor = _cursor(conn, query, row_factory or _dict_rows)
            if cursor in cursors:  # a kept cursor's rows are read after the pipeline
                cursor = _new_cursor(conn, query, row_factory or _dict_rows)
            await cursor.execute(*_bound(cursor, query))
            cursors.append(cursor)
    return [await cursor.fetchall() if _has_rows(cursor) else [] for cursor in cursors]


async def fetch_async(conn: psycopg.AsyncConnection[Any], query: Query,
                      row_factory: AsyncRowFactory[R]) -> list[R]:
    """As ``execute_async``, each row built by ``row_factory`` (the worker's claims)."""
    cursor: psycopg.AsyncCursor[R] = _cursor(conn, query, row_factory)
    attempts = MOVED_ROW_ATTEMPTS if _own_transaction(conn) else 1
    for attempt in range(1, attempts + 1):
        try:
            await cursor.execute(*_bound(cursor, query))
        except psycopg.errors.SerializationFailure:
            if attempt == attempts:
                raise
        else:
            break
    return await cursor.fetchall() if _has_rows(cursor) else []


# psycopg keeps a cursor's adapters (its parameters' dumpers, its columns'
# loaders) for as long as the same statement text runs on it again; a new
# cursor per statement looked them all up every time, a measurable part of a
# single add's client time (docs/performance.md). So portqueue's own
# connections keep one cursor per statement for the statements below: run at
# high rates, with small results
# (a kept cursor holds its last result until its statement runs again, so a
# read's page of payloads is never kept).
KEPT_CURSOR_STATEMENTS = frozenset({
    "add_job_to_open_queue", "add_job", "add_jobs", "add_unkeyed_jobs",
    "complete_jobs", "fail_jobs", "touch_jobs",
})


class CursorKeepingConnection(psycopg.Connection[Any]):
    """A connection of portqueue's own pools: it keeps cursors (see above)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.kept_cursors: dict[tuple[str, object], psycopg.Cursor[Any]] = {}


class AsyncCursorKeepingConnection(psycopg.AsyncConnection[Any]):
    """A connection of portqueue's own async pools: it keeps cursors (see above)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.kept_cursors: dict[tuple[str, object], psycopg.AsyncCursor[Any]] = {}


def _cursor(conn: Any, query: Query, row_factory: Any) -> Any:
    kept = getattr(conn, "kept_cursors", None)
    if kept is None or query.name not in KEPT_CURSOR_STATEMENTS:
        return _new_cursor(conn, query, row_factory)
    # The row factory is part of the key: setting a kept cursor's would run
    # it at once on the cursor's previous result.
    key = (query.sql, row_factory)
    cursor = kept.get(key)
    if cursor is None:
        cursor = kept[key] = _new_cursor(conn, query, row_factory)
    return cursor


# A statement converted once (Query.positional) runs on a raw cursor, which
# takes its $n placeholders as they are; on a connection with a cursor class
# of its caller's choosing (a tx= connection's), the statement goes as written.
_DEFAULT_CURSORS = (psycopg.Cursor, psycopg.AsyncCursor)
_RAW_CURSORS = (psycopg.RawCursor, psycopg.AsyncRawCursor)


def _new_cursor(conn: Any, query: Query, row_factory: Any) -> Any:
    if query.positional is None or conn.cursor_factory not in _DEFAULT_CURSORS:
        return conn.cursor(row_factory=row_factory)
    raw = psycopg.AsyncRawCursor if isinstance(conn, psycopg.AsyncConnection) else psycopg.RawCursor
    return raw(conn, row_factory=row_factory)


def _bound(cursor: Any, query: Query) -> tuple[str, Any]:
    """The text and parameters ``cursor`` takes for ``query``."""
    if query.positional is not None and isinstance(cursor, _RAW_CURSORS):
        return query.positional.sql, [query.params[name] for name in query.positional.names]
    return query.sql, query.params


# Every statement portqueue runs goes through execute_sync or fetch_async, the
# worker's claims and completions included, so they skip what psycopg's
# dict_row and cursor.description cost: a Column object per column per
# statement, just to read the names. (A cursor needs no closing: it holds no
# server-side state.)


def _has_rows(cursor: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]) -> bool:
    result = cursor.pgresult
    return result is not None and result.status == pq.ExecStatus.TUPLES_OK


def column_names(cursor: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]) -> list[str]:
    """The result's column names (none without a result)."""
    result = cursor.pgresult
    if result is None or not _has_rows(cursor):
        return []
    encoding = cursor.connection.info.encoding
    return [(result.fname(index) or b"").decode(encoding) for index in range(result.nfields)]


def _dict_rows(cursor: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]) -> RowMaker[dict[str, Any]]:
    if not _has_rows(cursor):
        return _no_row
    names = column_names(cursor)

    def make_row(values: Sequence[Any]) -> dict[str, Any]:
        return dict(zip(names, values, strict=True))

    return make_row


def _no_row(values: Sequence[Any]) -> dict[str, Any]:
    raise psycopg.ProgrammingError("the statement returned no rows")


def call_blocking_sync(function: Callable[[], T]) -> T:
    return function()


async def call_blocking_async(function: Callable[[], T]) -> T:
    return await asyncio.to_thread(function)


def sqlstate(error: BaseException) -> str | None:
    """The SQLSTATE behind ``error``, through SQLAlchemy's and Django's wrappers."""
    seen: BaseException | None = error
    while seen is not None:
        code = getattr(seen, "sqlstate", None) or getattr(seen, "pgcode", None)
        if isinstance(code, str):
            return code
        seen = getattr(seen, "orig", None) or seen.__cause__
    return None


UNIQUE_VIOLATION = "23505"
