"""The connections handlers use for ``job.transaction()``: one pool per kind
of handler (sync, async), created on first use, and what holds one now.

What holds one now is known so that stop() can end a handler that refuses
to: its transaction rolled back and its locks freed when the worker stops,
not when the process exits (or never, in-process).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from portqueue import worker_operations as ops
from portqueue.settings import Settings
from portqueue.worker.connections import Connections

log = logging.getLogger("portqueue.worker")


class HandlerConnections:
    def __init__(self, settings: Settings, worker_id: str) -> None:
        self._settings = settings
        self._worker_id = worker_id
        self._sync_pool: ConnectionPool | None = None
        self._sync_lock = threading.Lock()
        # Server pids of the connections sync handlers hold now. Guarded by _sync_lock.
        self._sync_pids: set[int] = set()
        self._async_pool: AsyncConnectionPool | None = None
        self._async_held: set[psycopg.AsyncConnection[Any]] = set()

    def sync_connection(self) -> contextlib.AbstractContextManager[psycopg.Connection[Any]]:
        # Created on first use, from a handler thread: only handlers use it.
        # Locked: handlers entering job.transaction() together would each
        # create a pool, and all but one would leak their connections.
        with self._sync_lock:
            if self._sync_pool is None:
                self._sync_pool = ConnectionPool(
                    self._settings.dsn, min_size=0, max_size=self._settings.pool_max_size,
                    kwargs=self._settings.connection_kwargs("handler"), name="portqueue:handler",
                    open=True, check=ConnectionPool.check_connection)
        return self._tracked_sync(self._sync_pool)

    @contextlib.contextmanager
    def _tracked_sync(self, pool: ConnectionPool) -> Iterator[psycopg.Connection[Any]]:
        """A sync handler's connection, its server pid known while checked out."""
        with pool.connection() as conn:
            pid = conn.info.backend_pid
            with self._sync_lock:
                self._sync_pids.add(pid)
            try:
                yield conn
            finally:
                with self._sync_lock:
                    self._sync_pids.discard(pid)

    def async_connection(
        self,
    ) -> contextlib.AbstractAsyncContextManager[psycopg.AsyncConnection[Any]]:
        return self._tracked_async()

    @contextlib.asynccontextmanager
    async def _tracked_async(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        if self._async_pool is None:
            self._async_pool = AsyncConnectionPool(
                self._settings.dsn, min_size=0, max_size=self._settings.pool_max_size,
                open=False, kwargs=self._settings.connection_kwargs("handler"),
                name="portqueue:handler",
                # Checked on checkout (one empty query): after a restart or a
                # failover a pooled connection is dead, and handing it to a
                # handler would fail its attempt and run it again.
                check=AsyncConnectionPool.check_connection)
            await self._async_pool.open()
        async with self._async_pool.connection() as conn:
            self._async_held.add(conn)
            try:
                yield conn
            finally:
                self._async_held.discard(conn)

    async def close_held_async(self, stuck: int) -> None:
        """``stuck`` async handlers ignored cancellation, and the pool will not
        close a connection in use: close their connections here, so the server
        rolls their transactions back and frees their locks now."""
        log.warning("worker %s: %d async handler(s) ignored cancellation; closing "
                    "%d connection(s) they hold", self._worker_id, stuck, len(self._async_held))
        for conn in list(self._async_held):
            await conn.close()

    async def end_stuck_sync_sessions(self, connections: Connections) -> None:
        """Sync handlers still holding a job.transaction() connection now
        (their jobs released or timed out) are stuck where no signal reaches:
        the server ends their sessions (see end_sessions in sql/worker.sql)."""
        with self._sync_lock:
            pids = sorted(self._sync_pids)
        # Behind PgBouncer (poll_only) a connection's backend pid is not the
        # server session's, and ending it could end someone else's session.
        if pids and not self._settings.poll_only:
            log.warning("worker %s: %d sync handler(s) still hold a connection; ending "
                        "their sessions", self._worker_id, len(pids))
            with contextlib.suppress(psycopg.Error):
                await connections.execute(ops.end_sessions(self._settings.queries, pids))

    async def close(self) -> None:
        if self._async_pool is not None:
            await self._async_pool.close()
        if self._sync_pool is not None:
            await asyncio.to_thread(self._sync_pool.close)
