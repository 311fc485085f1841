"""The shape every maintenance service shares.

A service runs in every worker: ``run(stopping)`` loops on a jittered
interval, and ``run_once()`` does one pass of bounded batches, each batch a
short transaction that first takes the service's transaction-scoped
advisory lock (so one process acts at a time) and sets a statement timeout
(so a batch never holds locks for long). A new service is a subclass that
names itself, picks its defaults and says what one batch is.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from portqueue import maintenance_operations as ops
from portqueue._testing import checkpoint
from portqueue.driver import execute_async
from portqueue.maintenance.leader import Leadership
from portqueue.queries import Query
from portqueue.settings import Settings

log = logging.getLogger("portqueue.maintenance")

STATEMENT_TIMEOUT_MS = 30_000
TRANSACTION_DEADLINE_SECONDS = STATEMENT_TIMEOUT_MS / 1000 + 5


def lock_key(schema: str, service: str) -> int:
    return zlib.crc32(f"portqueue.maintenance.{service}:{schema}".encode())


class Service:
    """``interval`` (seconds between passes, jittered ±20 %) and ``batch_size`` default
    to the subclass's ``interval_seconds`` and ``default_batch_size``."""

    name: str
    interval_seconds: float
    default_batch_size: int
    # A pass's count in the log, e.g. "expired %d job(s) not started in time".
    done: str

    # Set by the worker: passes run only while this worker leads the role
    # (None: always, as in ``portqueue prune``).
    leadership: Leadership | None = None

    def __init__(self, settings: Settings, pool: AsyncConnectionPool[Any],
                 interval: float | None = None, batch_size: int | None = None) -> None:
        self.settings = settings
        self.pool = pool
        self.interval = self.interval_seconds if interval is None else interval
        self.batch_size = self.default_batch_size if batch_size is None else batch_size
        self.q = settings.queries

    async def run(self, stopping: Callable[[], bool],
                  sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        """Passes until ``stopping()``; ``sleep`` waits between them (the
        worker's returns early on stop, so stop() never waits an interval)."""
        while not stopping():
            try:
                if self.leadership is not None and not await self.leadership.leads():
                    await sleep(self.next_sleep())
                    continue
                count = await self.run_once()
                if count:
                    log.info(self.done, count)
            except psycopg.Error as exc:
                log.warning("%s pass failed: %s", self.name, exc)
                self.after_error()
            if not stopping():
                await sleep(self.next_sleep())

    def next_sleep(self) -> float:
        return self.interval * random.uniform(0.8, 1.2)

    def after_error(self) -> None:
        """Forget what a failed pass learnt (a subclass hook)."""

    async def run_once(self) -> int:
        raise NotImplementedError

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A worker-pool connection, bounded: one still in use
        TRANSACTION_DEADLINE_SECONDS later has stopped answering (the server's
        statement_timeout would have ended a slow statement), so it is closed,
        which fails the statement waiting on it at once, and the pass fails
        like any database error instead of waiting forever."""
        async with self.pool.connection() as conn:
            guard = asyncio.get_running_loop().call_later(
                TRANSACTION_DEADLINE_SECONDS, conn.pgconn.finish)
            try:
                yield conn
            finally:
                guard.cancel()

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A bounded worker-pool connection (``connection``) inside one
        transaction: the pool is autocommit, and what ``begin`` takes must
        last until the batch ends."""
        async with self.connection() as conn, conn.transaction():
            yield conn

    async def begin(self, conn: psycopg.AsyncConnection[Any]) -> bool:
        """Take this service's lock for the transaction (``conn`` from
        ``transaction()``); False if another process has it."""
        if not ops.lock_acquired(await execute_async(conn, ops.try_lock(
                self.q, key=lock_key(self.settings.schema, self.name)))):
            return False
        await execute_async(conn, ops.set_statement_timeout(
            self.q, milliseconds=STATEMENT_TIMEOUT_MS))
        return True


class BatchService(Service):
    """A service whose pass repeats one statement until a batch comes back short."""

    def batch_query(self) -> Query:
        raise NotImplementedError

    def handled(self, rows: list[dict[str, Any]]) -> None:
        """The rows one committed batch returned (a subclass hook: metrics)."""

    async def run_once(self) -> int:
        """One pass, if no other process is running this service now."""
        total = 0
        while True:
            async with self.transaction() as conn:
                if not await self.begin(conn):
                    return total
                # Pause points for the fault tests (a no-op otherwise): the
                # batch's transaction is open, its lock held, before and after
                # the statement.
                await checkpoint(f"{self.name}.before_batch")
                rows = await execute_async(conn, self.batch_query())
                await checkpoint(f"{self.name}.after_batch")
            self.handled(rows)
            total += len(rows)
            if len(rows) < self.batch_size:
                return total
