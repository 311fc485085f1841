"""A dedicated session several loops take in turn: the claim session, which
the fetcher and the heartbeat share (see connections.py, the budget)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import psycopg

if TYPE_CHECKING:
    from portqueue.worker.connections import Connections


class Session:
    """A dedicated session its users take in turn (claims and heartbeats),
    opened on first use and again after it failed."""

    def __init__(self, connections: Connections, role: str) -> None:
        self._connections = connections
        self.role = role
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._lock = asyncio.Lock()

    async def connect(self) -> psycopg.AsyncConnection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = await self._connections.connect(self.role)
        return self._conn

    @contextlib.asynccontextmanager
    async def use(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """The session, to this caller alone until the block ends; closed
        if the block fails on it, so the next user opens a new one."""
        async with self._lock:
            conn = await self.connect()
            try:
                yield conn
            except (psycopg.Error, OSError):
                await self._close()
                raise

    async def close(self) -> None:
        async with self._lock:
            await self._close()

    async def _close(self) -> None:
        conn, self._conn = self._conn, None
        await self._connections.discard(conn)
