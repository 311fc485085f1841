"""The listener: a dedicated LISTEN session, re-established with backoff.

A job notification names a queue: that queue is claimed when it has a free
slot (``Demand.want``). A cancel notification names a job: its signal is set
if it runs here. After every (re)connect all queues are claimed once, since
notifications sent while nobody listened are lost.

With many processes consuming one queue, every NOTIFY would wake each of
them (its backend, then its loop) and make each with a free slot claim, all
but one finding nothing: 50 idle processes and 50 adds a second kept both
cores busy and the producer's add p50 went up 10- to 14-fold (measured:
docs/performance.md, "Many worker processes"). So only the WAKE_SHARE oldest
live workers of a queue (the worker table, read before LISTEN and at each
health check) listen. A worker that is not among them for any of its queues
LISTENs on no channel at all: PostgreSQL signals every backend that listens
on any channel of the database at every NOTIFY, whatever the channel. It
claims at every poll, stretched so that the queue's pollers together poll
about WAKE_SHARE times a poll interval (``poll_stretch``; a claim that fills
its slots claims again as they free, whatever the stretch), and the
cancels of its running jobs reach them with the heartbeat (a third of the
lease) instead of at once.

The listeners of a queue take turns by rank, so that an add makes one claim,
not WAKE_SHARE (three of which found nothing): the first (oldest) claims at
once; when it has no free slot for the queue it passes the wake-up on (a
NOTIFY on the passed channel) and the others claim at once. The others also
claim, PASS_SAFETY_SECONDS after a wake-up (one claim for all the wake-ups
of that window), in case the first is gone and not yet counted out: a job
never waits for the poll interval while a listener has a free slot.

A lost session is said once (one warning), however many reconnects it
takes (a full server may refuse them for minutes), and its return once
(info); the fetcher's poll claims meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Literal

import psycopg
import psycopg.sql

from portqueue import worker_operations as ops
from portqueue.driver import execute_async
from portqueue.queries import Queries
from portqueue.worker.connections import Connections, one_line
from portqueue.worker.demand import Demand
from portqueue.worker.state import RunningJobs
from portqueue.worker.stopping import Stopping

log = logging.getLogger("portqueue.worker")

RECONNECT_MAX_SECONDS = 10.0
# A LISTEN connection quiet this long is probed with SELECT 1, which must
# answer within a third of it (psycopg then waits up to 5 s more for the
# server to cancel it): a black-holed connection is replaced within about
# 4/3 of this plus 5 s, instead of being waited on forever.
LISTEN_HEALTH_SECONDS = 15.0
# How many of a queue's workers listen for its wake-ups (the oldest live ones).
WAKE_SHARE = 4
# The most poll intervals between the polls of a worker that hears no wake-ups.
POLL_STRETCH_MAX = 5.0
# How long a queue's other listeners leave a wake-up to its first one before
# they claim too (once for all the wake-ups of that time).
PASS_SAFETY_SECONDS = 0.25


def poll_stretch(workers: dict[str, int]) -> float:
    """How many poll intervals a worker that hears no wake-ups waits between
    polls: its queues' pollers together poll about WAKE_SHARE times an
    interval (the busiest queue's count decides), up to POLL_STRETCH_MAX."""
    pollers = min(workers.values(), default=WAKE_SHARE + 1) - WAKE_SHARE
    return min(max(pollers / WAKE_SHARE, 1.0), POLL_STRETCH_MAX)


async def readable(conn: psycopg.AsyncConnection[Any], seconds: float) -> None:
    """Until the server sends something on ``conn`` (a notification, an error,
    its end) or ``seconds`` pass. Not psycopg's ``notifies(timeout=…)``: its
    wait wakes every 0.1 s to look for interrupts, so every worker process,
    listening or not, woke ten times a second for nothing, which at 50 idle
    processes on 2 cores was most of their CPU (docs/performance.md, "procs
    (session 2026-12-02 evening)")."""
    loop = asyncio.get_running_loop()
    woken = loop.create_future()

    def wake() -> None:
        if not woken.done():
            woken.set_result(None)

    fd = conn.fileno()
    loop.add_reader(fd, wake)
    timer = loop.call_later(seconds, wake)
    try:
        await woken
    finally:
        timer.cancel()
        loop.remove_reader(fd)


class Listener:
    def __init__(self, connections: Connections, queries: Queries, demand: Demand,
                 jobs: RunningJobs, stopping: Stopping, worker_id: str,
                 check_seconds: float = LISTEN_HEALTH_SECONDS) -> None:
        self._connections = connections
        self.q = queries
        self._demand = demand
        self._jobs = jobs
        self._stopping = stopping
        self._worker_id = worker_id
        self._check_seconds = check_seconds
        self._lost = False
        # This worker's rank among each queue's live workers; unknown is 1.
        self._ranks: dict[str, int] = {}
        self._subscribed = False
        # Queues whose wake-up this (first) listener could not take: passed on.
        self._to_pass: set[str] = set()
        # The other listeners' safety claims, by queue.
        self._later: dict[str, asyncio.TimerHandle] = {}

    async def run(self) -> None:
        failures = 0
        # Opened at start by the worker's admission, when it had one to open.
        conn, self._connections.first_listener = self._connections.first_listener, None
        while not self._stopping():
            if conn is None:
                try:
                    conn = await self._connections.connect("listener")
                except psycopg.Error as exc:
                    failures += 1
                    self._say_lost(f"cannot reconnect: {one_line(exc)}")
                    await self._stopping.sleep(min(0.1 * 2 ** failures, RECONNECT_MAX_SECONDS))
                    continue
            try:
                await self._stopping.until_stopped(self._listen(conn))
                failures = 0
            except (psycopg.Error, asyncio.TimeoutError, OSError) as exc:
                failures += 1
                self._say_lost(one_line(exc))
                await self._stopping.sleep(min(0.1 * 2 ** failures, RECONNECT_MAX_SECONDS))
            finally:
                await self._connections.discard(conn)
                conn = None

    def _say_lost(self, why: str) -> None:
        if not self._lost:
            self._lost = True
            log.warning("worker %s: LISTEN connection lost (%s); reconnecting, and polling "
                        "every poll interval meanwhile", self._worker_id, why)

    def _listening(self) -> None:
        if self._lost:
            self._lost = False
            log.info("worker %s: LISTEN connection back", self._worker_id)

    async def _listen(self, conn: psycopg.AsyncConnection[Any]) -> None:
        # What arrives while this session runs a statement (the rank, a pass,
        # a probe) psycopg reads itself: it goes to _heard at once.
        conn.add_notify_handler(self._heard)
        # Before LISTEN, so that LISTEN is the session's last statement in
        # pg_stat_activity until the first health check (operators look).
        await self._rank(conn)
        self._subscribed = False
        if self._wakes_any():
            await self._subscribe(conn, "LISTEN")
        self._listening()
        # Jobs added while no connection listened: look now.
        self._demand.want_all()
        loop = asyncio.get_running_loop()
        while not self._stopping():
            checked_at = loop.time() + self._check_seconds
            while True:
                # What arrived: one read of the socket, no wait. The fetcher
                # it woke claims first: this loop's own work waits a turn.
                if self._read(conn):
                    await asyncio.sleep(0)
                await self._pass_on(conn)
                left = checked_at - loop.time()
                if left <= 0:
                    break
                await readable(conn, left)
            # Quiet for a while: prove the connection still answers, so a
            # silently dropped one is replaced instead of waited on forever
            # (and count the queues' workers again on the way).
            try:
                await asyncio.wait_for(self._probe(conn), self._check_seconds / 3)
            except asyncio.TimeoutError:
                raise asyncio.TimeoutError(
                    f"no answer to SELECT 1 within {self._check_seconds / 3:.1f}s") from None

    def _read(self, conn: psycopg.AsyncConnection[Any]) -> bool:
        """The notifications the socket holds, read and handled here, without
        a wait. Not psycopg's ``notifies(timeout=0)``: its lock, its wait and
        its deadline were a tenth of an idle worker's start latency
        (docs/performance.md, "latency (session 2026-12-03)"). A lost
        connection fails here (OperationalError), as a statement would.
        Whether any arrived."""
        pgconn = conn.pgconn
        pgconn.consume_input()
        notify = pgconn.notifies()
        heard = notify is not None
        encoding = conn.info.encoding
        while notify is not None:
            self._heard(psycopg.Notify(notify.relname.decode(encoding),
                                       notify.extra.decode(encoding), notify.be_pid))
            notify = pgconn.notifies()
        return heard

    def _heard(self, notify: psycopg.Notify) -> None:
        queue = notify.payload
        rank = self._ranks.get(queue, 1)
        if notify.channel == self.q.job_channel:
            # Only the queue named, and only once it has a free slot.
            if rank == 1:
                if self._demand.handles(queue) and self._demand.free(queue) <= 0:
                    self._to_pass.add(queue)
                self._demand.want(queue)
            elif rank <= WAKE_SHARE and queue not in self._later:
                self._later[queue] = asyncio.get_running_loop().call_later(
                    PASS_SAFETY_SECONDS, self._want_later, queue)
        elif notify.channel == self.q.passed_channel:
            if 1 < rank <= WAKE_SHARE:
                later = self._later.pop(queue, None)
                if later is not None:
                    later.cancel()
                self._demand.want(queue)
        elif notify.channel == self.q.cancel_channel:
            running = self._jobs.get(notify.payload)
            if running is not None:
                running.state.set("cancelled")

    def _want_later(self, queue: str) -> None:
        self._later.pop(queue, None)
        self._demand.want(queue)

    async def _pass_on(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """The wake-ups this first listener had no free slot for, to the others."""
        while self._to_pass:
            queue = self._to_pass.pop()
            await self._connections.within(conn, conn.execute(
                "SELECT pg_notify(%s, %s)", [self.q.passed_channel, queue]))

    async def _probe(self, conn: psycopg.AsyncConnection[Any]) -> None:
        await self._rank(conn)
        if self._wakes_any() != self._subscribed:
            # A listener stopped (or started): the share moves.
            await self._subscribe(conn, "UNLISTEN" if self._subscribed else "LISTEN")
            if self._subscribed:
                self._demand.want_all()
        # Last, so that pg_stat_activity shows the probe (operators look).
        await conn.execute("SELECT 1")

    def _wakes_any(self) -> bool:
        return any(self._ranks.get(queue, 1) <= WAKE_SHARE for queue in self._demand.queues)

    async def _subscribe(self, conn: psycopg.AsyncConnection[Any],
                         command: Literal["LISTEN", "UNLISTEN"]) -> None:
        """LISTEN (or UNLISTEN) the cancel and passed channels, then the job channel."""
        for channel in (self.q.cancel_channel, self.q.passed_channel, self.q.job_channel):
            name = psycopg.sql.Identifier(channel)
            await self._connections.within(conn, conn.execute(
                psycopg.sql.SQL("LISTEN {}").format(name) if command == "LISTEN"
                else psycopg.sql.SQL("UNLISTEN {}").format(name)))
        self._subscribed = command == "LISTEN"

    async def _rank(self, conn: psycopg.AsyncConnection[Any]) -> None:
        queues = self._demand.queues
        if queues:
            rows = await self._connections.within(conn, execute_async(
                conn, ops.queue_peers(self.q, self._worker_id, queues)))
            self._ranks = ops.peer_ranks(rows)
            self._demand.poll_stretch = 1.0 if self._wakes_any() else poll_stretch(
                ops.peer_counts(rows))
