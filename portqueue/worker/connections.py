"""The worker's connections floor: its pool, its dedicated sessions, and how
a failure on either is handled.

Roles (each names its connections in pg_stat_activity as
``<application_name>:<role>``): ``worker`` (the pool: completions, event
reads, maintenance and scheduler passes), ``fetcher`` (claims),
``heartbeat`` and ``listener`` (sessions of their own, so neither claims nor
completions can starve them), and ``handler`` (``job.transaction()``, see
``handlers.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from portqueue.availability import is_unavailable, session_lost
from portqueue.driver import AsyncCursorKeepingConnection, execute_async
from portqueue.queries import Query
from portqueue.settings import Settings

# The pool's size: the completer, event reads and the maintenance services
# share it (claims, heartbeats and LISTEN have sessions of their own).
POOL_MAX_SIZE = 7


async def close_quietly(conn: psycopg.AsyncConnection[Any] | None) -> None:
    """Close a connection of the worker's own that may already be broken."""
    if conn is not None:
        with contextlib.suppress(psycopg.Error, OSError):
            await conn.close()


class Connections:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.pool = AsyncConnectionPool(
            # Handlers never use it, so none of its users can be starved by
            # them. Autocommit: completions are single statements, one round
            # trip each; what needs a transaction opens one.
            settings.dsn, min_size=1, max_size=POOL_MAX_SIZE, open=False,
            kwargs={**settings.connection_kwargs("worker"), "autocommit": True},
            connection_class=AsyncCursorKeepingConnection, name="portqueue:worker")

    async def open(self) -> None:
        await self.pool.open(wait=True, timeout=30)

    async def close(self) -> None:
        await self.pool.close()

    async def execute(self, *queries: Query) -> list[list[dict[str, Any]]]:
        """Run queries on a pool connection: one alone, in autocommit (one
        round trip); several in one transaction."""
        async with self.pool.connection() as conn:
            if len(queries) == 1:
                return [await execute_async(conn, queries[0])]
            async with conn.transaction():
                return [await execute_async(conn, query) for query in queries]

    async def check_after(self, error: BaseException) -> bool:
        """After a restart, a failover or terminated sessions, the pool's idle
        connections are dead too, and each would fail the next write (and add
        a backoff step) in turn: test them all now, once, instead. True when
        ``error`` ended a session (worth retrying at once)."""
        if is_unavailable(error):
            with contextlib.suppress(Exception):
                await self.pool.check()
        return session_lost(error)

    async def connect(self, role: str) -> psycopg.AsyncConnection[Any]:
        """A dedicated autocommit session for ``role``."""
        connecting = asyncio.ensure_future(psycopg.AsyncConnection.connect(
            self.settings.dsn, autocommit=True, **self.settings.connection_kwargs(role)))
        try:
            return await asyncio.shield(connecting)
        except asyncio.CancelledError:
            # Cancelled mid-connect, psycopg leaves a connection that completes
            # to the garbage collector, and its server session open until then
            # (seen: a worker stopped right after start kept its LISTEN
            # session). So the connect runs to its end here and what it opened
            # is closed.
            with contextlib.suppress(psycopg.Error, OSError):
                await (await connecting).close()
            raise
