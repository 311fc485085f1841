"""The worker's connections floor: its pool, its dedicated sessions, the
deadline on every statement they run, and how a failure on either is handled.

Roles (each names its connections in pg_stat_activity as
``<application_name>:<role>``): ``worker`` (the pool: outcomes, event
reads, maintenance and scheduler passes), ``fetcher`` (claims and
heartbeats, one at a time, on one session: both are short statements, so
neither waits long for the other, and neither waits behind a completion
batch or a maintenance pass), ``listener`` (LISTEN), and ``handler``
(``job.transaction()``, see ``handlers.py``, outside the budget).

The worker's own connections are a budget (``connections``, default 3): the
listener, the claim session, and the pool gets the rest (one more without
the listener, with ``poll_only``); ``admission.py`` opens them at start, all
or none.

Every statement on the worker's own roles has a deadline twice over: the
server's ``statement_timeout`` for the role, and a client-side one a little
longer, which also covers a connection that stops answering altogether (a
half-open TCP connection, a stuck proxy): the statement fails with
``StatementDeadline`` and its connection is closed, so the caller's retry
opens a new one. TCP keepalives and ``tcp_user_timeout`` let the kernel
notice a dead peer too. The pool's sessions also end a transaction left idle
for ``IDLE_IN_TRANSACTION_SECONDS``: a worker frozen or cut off inside a
maintenance or scheduler pass cannot keep its advisory lock or row locks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool

from portqueue.availability import is_unavailable, session_lost
from portqueue.driver import AsyncCursorKeepingConnection, execute_async
from portqueue.queries import Query
from portqueue.settings import Settings
from portqueue.worker.sessions import Session

log = logging.getLogger("portqueue.worker")

T = TypeVar("T")

# The worker's own connections by default, and the fewest it can work with:
# the listener, the claim session and a pool of one.
DEFAULT_CONNECTIONS = 3
MIN_CONNECTIONS = 3
# The longest a statement may run, per role, server-side (statement_timeout).
# The maintenance services set their own, per transaction.
STATEMENT_SECONDS = {"worker": 30.0, "fetcher": 10.0, "listener": 10.0}
# The client waits this much longer than the server's timeout before it gives
# up on the connection (the server's own cancellation answers first when the
# server is merely slow).
CLIENT_MARGIN_SECONDS = 2.0
IDLE_IN_TRANSACTION_SECONDS = 10.0
# The kernel's view of a dead peer: probes after 10 s of silence, every 5 s,
# 3 of them; unacknowledged data for 30 s ends the connection.
TCP_KWARGS: dict[str, Any] = {"keepalives": 1, "keepalives_idle": 10,
                              "keepalives_interval": 5, "keepalives_count": 3,
                              "tcp_user_timeout": 30_000}


class StatementDeadline(psycopg.OperationalError):
    """A statement on a worker connection got no answer in time (its
    connection is closed; the caller retries on a new one)."""


def one_line(error: BaseException) -> str:
    """An error for a log line: libpq's messages span lines (the host tried,
    then FATAL: …)."""
    return " ".join(str(error).split())


def client_deadline(role: str) -> float:
    return STATEMENT_SECONDS[role] + CLIENT_MARGIN_SECONDS


def role_kwargs(settings: Settings, role: str) -> dict[str, Any]:
    """Connection settings for one of the worker's own roles: the client's,
    TCP keepalives, and the role's server-side timeouts."""
    kwargs = {**settings.connection_kwargs(role), **TCP_KWARGS}
    if settings.poll_only:
        # PgBouncer refuses startup options it does not know, and a session
        # setting would outlive the transaction on a shared server connection:
        # the client-side deadline alone bounds statements there.
        return kwargs
    # JIT compiles a statement whose estimated cost passes jit_above_cost, on
    # every execution: a generic plan of claim_limited estimates its recursive
    # scans high enough, and compiling cost far more than running it
    # (docs/performance.md, "claims (session 2026-12-04)"). No statement of
    # the worker's own is analytic.
    options = [f"-c statement_timeout={int(STATEMENT_SECONDS[role] * 1000)}", "-c jit=off"]
    if role == "worker":
        options.append(
            f"-c idle_in_transaction_session_timeout={int(IDLE_IN_TRANSACTION_SECONDS * 1000)}")
    if role == "fetcher":
        # The plan cache keeps planning the plain claim afresh for every claim
        # of more than a few jobs (its generic plan's estimate loses to the
        # custom ones'), for a plan that runs no faster. Every statement of this
        # session is written to cost what it touches on any plan (the claims
        # pin their rows by id, the heartbeat's by primary key; claim_limited
        # gets a generic plan under the default anyway): docs/performance.md,
        # "drain (session 2026-12-03)".
        options.append("-c plan_cache_mode=force_generic_plan")
    given = conninfo_to_dict(settings.dsn).get("options")
    kwargs["options"] = " ".join([*([str(given)] if given else []), *options])
    return kwargs


async def close_quietly(conn: psycopg.AsyncConnection[Any] | None) -> None:
    """Close a connection of the worker's own that may already be broken."""
    if conn is not None:
        with contextlib.suppress(psycopg.Error, OSError):
            await conn.close()


def pool_size(settings: Settings, connections: int) -> int:
    """The pool's share of a worker's ``connections``: what the listener and
    the claim session leave."""
    return connections - (1 if settings.poll_only else 2)


class Connections:
    def __init__(self, settings: Settings, budget: int = DEFAULT_CONNECTIONS) -> None:
        self.settings = settings
        self.budget = budget
        # Every connection handed out and not yet closed, with its role: what
        # interrupt() closes, and what a deadline's log line names.
        self._open: dict[psycopg.AsyncConnection[Any], str] = {}
        self.pool = self._new_pool()
        self.claims = Session(self, "fetcher")
        # The LISTEN session admission opened, for the listener to take.
        self.first_listener: psycopg.AsyncConnection[Any] | None = None
        # Whether a connection of this worker's ever succeeded: a refusal after
        # that is the server's lack of room, not a wrong DSN (server_full).
        self.reached = False

    def _new_pool(self) -> AsyncConnectionPool[Any]:
        # Handlers never use it, so none of its users can be starved by them.
        # Autocommit: completions are single statements, one round trip each;
        # what needs a transaction opens one.
        return AsyncConnectionPool(
            self.settings.dsn, min_size=1, max_size=pool_size(self.settings, self.budget),
            open=False, kwargs={**role_kwargs(self.settings, "worker"), "autocommit": True},
            connection_class=AsyncCursorKeepingConnection, name="portqueue:worker")

    async def open(self) -> None:
        await self.pool.open(wait=True, timeout=30)

    async def close_all(self) -> None:
        """Close what admission opened, and start a new pool (a closed pool
        cannot be opened again)."""
        await self.close()
        self.pool = self._new_pool()

    async def close(self) -> None:
        await self.claims.close()
        listening, self.first_listener = self.first_listener, None
        await self.discard(listening)
        await self.pool.close(timeout=1.0)

    async def interrupt(self) -> None:
        """Close every connection in use now: stop() calls it once its time
        is up, so whatever still waits on the database fails at once."""
        for conn in list(self._open):
            await close_quietly(conn)
        self._open.clear()

    @contextlib.asynccontextmanager
    async def pooled(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A pool connection (a maintenance pass's, an event read's), tracked
        while in use."""
        async with self.pool.connection(timeout=client_deadline("worker")) as conn:
            self._open[conn] = "worker"
            try:
                yield conn
            finally:
                self._open.pop(conn, None)

    async def execute(self, *queries: Query) -> list[list[dict[str, Any]]]:
        """Run queries on a pool connection: one alone, in autocommit (one
        round trip); several in one transaction. Within the role's deadline."""
        async with self.pooled() as conn:
            return await self.within(conn, self._run(conn, queries))

    @staticmethod
    async def _run(conn: psycopg.AsyncConnection[Any],
                   queries: tuple[Query, ...]) -> list[list[dict[str, Any]]]:
        if len(queries) == 1:
            return [await execute_async(conn, queries[0])]
        async with conn.transaction():
            return [await execute_async(conn, query) for query in queries]

    async def within(self, conn: psycopg.AsyncConnection[Any], work: Awaitable[T]) -> T:
        """``work`` on ``conn``, or StatementDeadline (and ``conn`` closed)
        once its role's client-side deadline passes."""
        role = self._open.get(conn, "worker")
        deadline = client_deadline(role)
        expired: list[bool] = []

        def expire() -> None:
            # Closed, not cancelled: psycopg would ask the server to cancel the
            # statement and wait seconds more for an answer that, on a
            # connection that stopped answering, never comes. Closing fails
            # the statement waiting on it at once.
            expired.append(True)
            conn.pgconn.finish()

        timer = asyncio.get_running_loop().call_later(deadline, expire)
        try:
            return await work
        except psycopg.Error as exc:
            if expired:
                raise StatementDeadline(
                    f"the {role} connection did not answer within {deadline:.0f}s") from exc
            raise
        finally:
            timer.cancel()

    async def check_after(self, error: BaseException) -> bool:
        """After a restart, a failover or terminated sessions, the pool's idle
        connections are dead too, and each would fail the next write (and add
        a backoff step) in turn: test them all now, once, instead. True when
        ``error`` ended a session (worth retrying at once)."""
        if is_unavailable(error) and not isinstance(error, StatementDeadline):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.pool.check(), client_deadline("worker"))
        return session_lost(error) and not isinstance(error, StatementDeadline)

    async def connect(self, role: str) -> psycopg.AsyncConnection[Any]:
        """A dedicated autocommit session for ``role``, tracked until closed."""
        connecting = asyncio.ensure_future(psycopg.AsyncConnection.connect(
            self.settings.dsn, autocommit=True, connect_timeout=int(client_deadline(role)),
            **role_kwargs(self.settings, role)))
        try:
            conn = await asyncio.shield(connecting)
        except asyncio.CancelledError:
            # Cancelled mid-connect, psycopg leaves a connection that completes
            # to the garbage collector, and its server session open until then
            # (seen: a worker stopped right after start kept its LISTEN
            # session). So the connect runs to its end here and what it opened
            # is closed.
            with contextlib.suppress(psycopg.Error, OSError):
                await (await connecting).close()
            raise
        self._open[conn] = role
        self.reached = True
        return conn

    async def discard(self, conn: psycopg.AsyncConnection[Any] | None) -> None:
        """Close a dedicated session (it may already be broken)."""
        if conn is not None:
            self._open.pop(conn, None)
            await close_quietly(conn)
