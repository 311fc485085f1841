"""The fetcher: the claim loop, on a session of its own.

It claims the queues ``Demand`` says are due, up to their free slots, in one
statement, and hands each claimed job to the runners. It waits for "a queue
is due, the poll interval, or stop", whichever comes first.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import psycopg

from portqueue import worker_operations as ops
from portqueue.driver import fetch_async
from portqueue.metrics import hooks
from portqueue.queries import Query
from portqueue.settings import Settings
from portqueue.worker.connections import Connections
from portqueue.worker.demand import Demand
from portqueue.worker.limits import Limits
from portqueue.worker.patterns import UNJUDGED, PatternVerdicts
from portqueue.worker.registry import QueueSpec
from portqueue.worker.state import Claimed
from portqueue.worker.stopping import Stopping, Wake

log = logging.getLogger("portqueue.worker")

RECONNECT_MAX_SECONDS = 10.0
# How long the worker claims with ``claim`` after ``claim_plain`` found a
# pending job with a pattern or a key, before it tries the lighter one again
# (one claim that finds nothing and says so, at most this often).
FULL_CLAIM_SECONDS = 10.0


class Fetcher:
    def __init__(self, settings: Settings, connections: Connections,
                 queues: Mapping[str, QueueSpec], demand: Demand, stopping: Stopping,
                 room: Wake, poll_interval: float, worker_id: str,
                 start: Callable[[Claimed, bool], None],
                 started: Callable[[list[str]], None],
                 unwritten: Callable[[], set[str]] = set) -> None:
        self._settings = settings
        self._connections = connections
        self._queues = queues
        self._demand = demand
        self._stopping = stopping
        self._room = room
        self._poll_interval = poll_interval
        self._worker_id = worker_id
        self._start = start
        self._started = started
        # The queues with an outcome waiting in the completer that frees a
        # slot: the completer claims a limited one in that outcome's
        # transaction (refill_claims), so the loop leaves it alone.
        self._unwritten = unwritten
        self._patterns = PatternVerdicts(settings.instance_key)
        self._limits = Limits(demand)
        # Held from a claim until its runners exist: stop() takes it before
        # draining, so a claim in flight commits and starts its jobs first
        # (otherwise they would stay active, never run, until their leases
        # lapsed and the rescuer spent an attempt).
        self.claiming = asyncio.Lock()
        # The completer's claims in flight (refill_claims to refill_ended):
        # the slots they asked for, not yet started here, and whether there
        # are none (stop() waits for that as for ``claiming``: their jobs
        # start before the drain looks at what runs).
        self._reserved: Counter[str] = Counter()
        self._refills = 0
        self.refills_settled = asyncio.Event()
        self.refills_settled.set()
        self._looping = False
        # Until when the plain claims go through ``claim`` (loop time): see
        # FULL_CLAIM_SECONDS. Before, ``claim_plain``.
        self._full_until = float("-inf")

    async def connect(self) -> psycopg.AsyncConnection[Any]:
        # Claims run on a connection of their own, not one from the pool: no
        # checkout per claim, and always the same warm backend (the pool hands
        # its idle connections out in turn), which shortens an idle worker's
        # commit-to-start latency (docs/performance.md). The heartbeat shares
        # it (connections.Session), between claims.
        return await self._connections.claims.connect()

    async def close(self) -> None:
        await self._connections.claims.close()

    async def run(self) -> None:
        # The session outlives the loop: the heartbeat keeps the running
        # jobs' leases on it through the drain (stop() closes it).
        self._looping = True
        try:
            await self._claim_until_stopped()
        finally:
            self._limits.close()

    async def _claim_until_stopped(self) -> None:
        failures = 0
        retried_at_once = False
        demand = self._demand
        loop = asyncio.get_running_loop()
        next_poll = loop.time() + self._poll_interval
        while not self._stopping():
            if not self._room.is_set():
                # Backpressure: outcomes are not being written as fast as jobs
                # finish; claiming more would only pile up finished jobs.
                await self._stopping.wait_for(self._room, None)
                continue
            demand.changed.clear()
            if not demand.ready():
                # Nothing to claim until a NOTIFY names a queue with a free
                # slot, a backlogged queue frees one, or the poll is due.
                wait = next_poll - loop.time()
                if wait > 0:
                    await self._stopping.wait_for(demand.changed, wait)
                    continue
                demand.want_all()
                next_poll = loop.time() + self._poll_interval * demand.poll_stretch
                continue
            asked = demand.take()
            try:
                async with self.claiming:
                    if self._stopping():
                        return
                    asked = self._still_to_claim(asked)
                    if not asked:
                        continue
                    rows = await self._claim(asked)
            except psycopg.Error as exc:
                # The claim's session may be gone (a restart, a failover, a
                # terminated backend): the next claim opens a new one, and is
                # tried at once rather than backed off as if the database
                # still refused, once in a row. The pool (completions) is
                # checked meanwhile.
                for queue in asked:
                    demand.want(queue)
                at_once = await self._connections.check_after(exc) and not retried_at_once
                retried_at_once = at_once
                failures += 0 if at_once else 1
                delay = 0.05 if at_once else min(0.1 * 2 ** failures, RECONNECT_MAX_SECONDS)
                log.warning("worker %s: claim failed (%s); retrying in %.1fs",
                            self._worker_id, exc, delay)
                await self._stopping.sleep(delay)
                continue
            failures = 0
            retried_at_once = False
            # A queue that filled its free slots may have more waiting: it is
            # claimed again as soon as a slot of it frees, not at the next
            # NOTIFY or poll, whatever the other queues returned.
            claimed = Counter(row.queue for row in rows if row.status != UNJUDGED)
            for row in rows:
                # An unjudged row takes no slot, but the patterns judged after
                # it may make jobs claimable: the queue is claimed again at once.
                if row.status == UNJUDGED:
                    claimed[row.queue] = asked.get(row.queue, 0)
            if not self._settings.poll_only:
                # A limited queue is claimed again when a slot frees in the
                # database (the completion's NOTIFY), not when a handler here
                # returns: until its outcome commits, the job still counts.
                for name in asked:
                    if self._limits.limited(name):
                        claimed[name] = min(claimed[name], asked[name] - 1)
            demand.claimed(asked, claimed)

    def _still_to_claim(self, asked: Mapping[str, int]) -> dict[str, int]:
        """``asked`` without what the completer claims: slots it refilled while
        this waited for the lock, and limited queues whose slots an outcome
        still to be written frees (their rows still count in the database: a
        claim now would find them taken, and the outcome's write claims them)."""
        unwritten = self._unwritten() if self._limits.queues else set()
        return {name: min(n, self._free(name)) for name, n in asked.items()
                if self._free(name) > 0
                and not (name in unwritten and self._limits.refillable(name))}

    def _free(self, queue: str) -> int:
        """The queue's free slots, less those a refill in flight asked for
        (none but for a limited queue)."""
        return self._demand.free(queue) - self._reserved[queue]

    def freed(self, queues: Iterable[str]) -> None:
        """Outcomes of these queues' jobs committed (the completer)."""
        self._limits.freed(queues)

    def refills(self, queues: Iterable[str]) -> bool:
        """(the completer) Whether outcomes of these queues' jobs may claim
        with them (refill_claims decides how many)."""
        return (self._looping and not self._stopping()
                and any(self._limits.refillable(name) for name in queues))

    def limited(self, queues: Iterable[str]) -> set[str]:
        """(the completer) Those of ``queues`` this loop claims with claim_limited."""
        return {name for name in queues if self._limits.limited(name)}

    def refill_claims(self, freeing: Mapping[str, int], unwritten: Mapping[str, int],
                      ) -> tuple[dict[str, int], list[list[Query]]]:
        """(the completer) The limited claims to send in the transaction of
        outcomes that free ``freeing`` slots per queue: the slots those
        outcomes free are claimed again by the commit that frees them, not by a
        claim of its own after it (one round trip and one wake-up less per
        cycle). Each limited queue with a free slot here that its rate does
        not hold back; none once stopping, nor in drain (which claims itself),
        nor while the loop claims (its claim may be of the same queue).

        Two such claims may be in flight at once (the completer writes a
        limited queue's outcomes in two halves, side by side): each asks for
        the slots its own outcomes free, plus the free slots no outcome still
        to be written (``unwritten``, these included) will claim, never more
        than are free here less what the other asked. Until ``refill_ended``
        the slots asked count as taken."""
        if not self._looping or self._stopping() or self.claiming.locked():
            return {}, []
        asked = {}
        for name, mine in freeing.items():
            if not self._limits.refillable(name):
                continue
            free = self._free(name)
            n = min(free, max(mine, free - (unwritten.get(name, 0) - mine)))
            if n > 0:
                asked[name] = n
        if not asked:
            return {}, []
        self._reserved.update(asked)
        self._refills += 1
        self.refills_settled.clear()
        return asked, self._transactions(asked)

    async def refilled(self, conn: psycopg.AsyncConnection[Any], asked: Mapping[str, int],
                       rows: list[Claimed]) -> None:
        """(the completer) The rows of ``refill_claims``' claims, committed:
        their jobs start as a claim's of this loop do."""
        jobs, _ = self._limits.learn(rows)  # claim_limited names no queue 'limited'
        await self._patterns.judge_unjudged(conn, self._settings.queries, jobs)
        self._start_rows(jobs)
        claimed = Counter(row.queue for row in jobs)
        # As after the loop's claims: claimed again when a slot frees, not as
        # backlogged when a handler here returns.
        self._demand.claimed(asked, {name: min(claimed[name], n - 1)
                                     for name, n in asked.items()})

    def refill_ended(self, asked: Mapping[str, int]) -> None:
        """(the completer) A claim of ``refill_claims`` is over: its jobs have
        started (``refilled``), or it failed."""
        self._reserved.subtract(asked)
        self._reserved = +self._reserved
        self._refills -= 1
        if not self._refills:
            self.refills_settled.set()

    async def claim_now(self, asked: dict[str, int]) -> list[Claimed]:
        """One claim outside the loop (drain): its jobs start as the loop's do."""
        async with self.claiming:
            return await self._claim(asked)

    def _transactions(self, asked: Mapping[str, int]) -> list[list[Query]]:
        return ops.claims(
            self._settings.queries, slots=asked,
            lease_seconds={name: self._queues[name].lease_seconds for name in asked},
            limited=self._limits.queues, worker_id=self._worker_id,
            plain_only=asyncio.get_running_loop().time() >= self._full_until,
            **self._patterns.claim_params())

    def _mixed(self, rows: list[Claimed]) -> tuple[list[Claimed], bool]:
        """A plain claim's rows without claim_plain's ``MIXED`` marker, and
        whether it had one (it claimed nothing: claim again with ``claim``,
        now and for FULL_CLAIM_SECONDS)."""
        if not any(row.status == ops.MIXED for row in rows):
            return rows, False
        self._full_until = asyncio.get_running_loop().time() + FULL_CLAIM_SECONDS
        return [row for row in rows if row.status != ops.MIXED], True

    async def _claim(self, asked: dict[str, int]) -> list[Claimed]:
        """Claim up to ``asked`` slots per queue and start what was claimed;
        returns every row (expired ones included: they used a slot)."""
        rows: list[Claimed] = []
        async with self._connections.claims.use() as conn:
            transactions = self._transactions(asked)
            while transactions:
                turned: list[str] = []
                for transaction in transactions:
                    if len(transaction) == 1:  # the plain claim
                        got, mixed = self._mixed(await self._connections.within(
                            conn, fetch_async(conn, transaction[0], Claimed.rows)))
                        if mixed:
                            # claim_plain claimed none of its queues: all again.
                            turned += [name for name in asked if name not in self._limits.queues]
                    else:
                        got = await self._connections.within(
                            conn, self._limits.claim(conn, transaction))
                    jobs, limited = self._limits.learn(got)
                    rows += jobs
                    turned += limited
                # Queues the plain claim passed over for their limits: claimed
                # the limited way now, not at their next wake-up (and those
                # claim_plain left to claim).
                transactions = self._transactions(
                    {name: asked[name] for name in dict.fromkeys(turned)}) if turned else []
            await self._patterns.judge_unjudged(conn, self._settings.queries, rows)
        self._start_rows(rows)
        return rows

    def _start_rows(self, rows: list[Claimed]) -> None:
        traced = hooks.tracing_on()
        started = []
        for claimed in rows:
            if claimed.status == UNJUDGED:
                continue  # its slot went to a pattern just judged
            if claimed.status == "expired":
                log.info("job %s on %r expired before it could start", claimed.id,
                         claimed.queue)
                continue
            self._start(claimed, traced)
            started.append(claimed.id)
        if started:
            # One event (and one snapshot read) per claim, not per job.
            self._started(started)
