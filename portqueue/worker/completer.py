"""The completer: writes the runners' outcomes in batches, fenced by lease token.

Outcomes arriving during a write go in the next one, so batches grow with
load while an idle worker writes each outcome at once; a batch holds at most
``MAX_BATCH`` outcomes (at most two statements, one transaction). While
outcomes wait, their jobs' leases are still this worker's: ``pending()``
lists them for the heartbeat, so a job whose outcome is stuck is not rescued
and run again, nor failed with LeaseExpired. While ``backlog_cap`` or more
wait, ``room`` is clear and the fetcher claims nothing: a database that takes
outcomes slowly slows claiming instead of piling up finished jobs.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

import psycopg

from portqueue import worker_operations as ops
from portqueue.availability import is_unavailable
from portqueue.queries import Queries, Query
from portqueue.worker.connections import Connections
from portqueue.worker.events import EventDispatch
from portqueue.worker.outcomes import (
    KINDS,
    Completion,
    Failure,
    Outcome,
    Settled,
    Snoozed,
    event_of,
    slot_freeing_counts,
    slot_freeing_queues,
)
from portqueue.worker.refill import Refill
from portqueue.worker.settled import resolve_unsure, settled_by_lease
from portqueue.worker.state import Running
from portqueue.worker.stopping import Wake

log = logging.getLogger("portqueue.worker")

MAX_BATCH = 1000
# The backlog cap, per slot of the worker's total concurrency: a small one
# makes the fetcher wait for every write under load, a large one lets a
# worker whose writes are stuck run that many more jobs before it stops
# claiming (measured: see docs/performance.md, "The worker in parts").
BACKLOG_PER_SLOT = 4
RETRY_MAX_SECONDS = 10.0
# While fewer than LINGER_BATCH outcomes wait and other handlers of this
# worker still run, a write waits up to LINGER_SECONDS for them: many
# processes of few slots each otherwise commit an outcome or two at a time,
# and their commits queue on the WAL (docs/performance.md, "procs"). An
# idle worker's lone outcome, and a busy worker's batches of LINGER_BATCH
# or more, are written at once.
LINGER_BATCH = 16
LINGER_SECONDS = 0.005
# A batch of at least SPLIT_MIN outcomes that frees slots of a limited queue
# the refill claims again is written in two halves side by side (the first
# on a write of its own, beside the main one): a limited slot frees only when
# its outcome commits, so in halves one half's jobs run while the other
# half's write and claim are on the server. Once started, the write beside
# goes on with the outcomes that wait while the main write is in flight, so
# the two take turns. Each write has its fixed cost, so halves must be large
# (docs/performance.md, "limited": small halves were slower than whole).
SPLIT_MIN = 64
# Shutting down with no database: after this many failed writes in a row the
# outcomes are given up (their leases lapse and the rescuer hands the jobs out).
CLOSING_ATTEMPTS = 5


class Completer:
    def __init__(self, connections: Connections, queries: Queries, events: EventDispatch,
                 worker_id: str, backlog_cap: int,
                 freed: Callable[[set[str]], None] = lambda queues: None,
                 running: Callable[[], int] = lambda: 0) -> None:
        self._connections = connections
        # How many handlers still run: their outcomes may join this batch.
        self._running = running
        # Told the queues of each batch of outcomes once it has committed:
        # their jobs' slots are free in the database from then on.
        self._freed = freed
        # Set by the runtime once the fetcher exists (None: outcomes only).
        self.refill: Refill | None = None
        self.q = queries
        self._events = events
        self._worker_id = worker_id
        self._backlog_cap = backlog_cap
        self._waiting: list[Outcome] = []
        self._writing: list[Outcome] = []
        # The write beside the main one (SPLIT_MIN), and what it writes.
        self._beside: asyncio.Task[None] | None = None
        self._writing_beside: list[Outcome] = []
        self._ready = asyncio.Event()
        self._closing = False
        self.room = Wake()
        self.room.set()
        # What was written, by kind (completed, failed, retried, cancelled,
        # snoozed): drain's result. ``idle`` is set while nothing waits to be
        # written, so drain claims again only once every outcome is in.
        self.written: Counter[str] = Counter()
        self.idle = asyncio.Event()
        self.idle.set()

    def add(self, outcome: Outcome) -> None:
        self._waiting.append(outcome)
        self.idle.clear()
        self._ready.set()
        self._update_room()

    def pending(self) -> list[Running]:
        """The jobs whose outcome is not written yet: their leases are still held."""
        return [outcome.running
                for outcome in (*self._writing, *self._writing_beside, *self._waiting)]

    def unwritten(self) -> set[str]:
        """The queues of outcomes waiting or being written that free a slot
        when written (a ``Settled`` one freed its slot when it committed)."""
        return slot_freeing_queues((*self._writing, *self._writing_beside, *self._waiting))

    def close(self) -> None:
        """Write what is queued, then end ``run``."""
        self._closing = True
        self._ready.set()

    async def run(self) -> None:
        try:
            while True:
                await self._ready.wait()
                self._ready.clear()
                await self._linger()
                await self._flush()
                # The write beside, when it ends, wakes this loop again.
                if not self._waiting and self._beside is None:
                    self.idle.set()
                if self._closing and not self._waiting and self._beside is None:
                    return
        finally:
            if self._beside is not None:  # cancelled: the write beside goes with it
                self._beside.cancel()

    async def _linger(self) -> None:
        """Let a small batch grow while this worker's other handlers finish."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + LINGER_SECONDS
        while (not self._closing and 0 < len(self._waiting) < LINGER_BATCH
               and self._running() > 0):
            left = deadline - loop.time()
            if left <= 0:
                return
            try:
                await asyncio.wait_for(self._ready.wait(), left)
            except asyncio.TimeoutError:
                return
            self._ready.clear()

    def _update_room(self) -> None:
        if len(self._waiting) + len(self._writing) + len(self._writing_beside) < self._backlog_cap:
            self.room.set()
        else:
            self.room.clear()

    async def _flush(self) -> None:
        failures = 0
        retried_at_once = False
        while self._waiting:
            batch, self._waiting = self._waiting[:MAX_BATCH], self._waiting[MAX_BATCH:]
            if len(batch) >= SPLIT_MIN and self._beside is None and self._refills(batch):
                half = len(batch) // 2
                # Unwritten from now: the main write's claim, asked first,
                # leaves the slots of these outcomes to the claim beside.
                self._writing_beside = batch[:half]
                self._beside = asyncio.create_task(self._write_beside(batch[:half]))
                batch = batch[half:]
            self._writing = batch
            try:
                await self._write_isolating(batch)
                failures = 0
            except psycopg.Error as exc:  # only retryable ones leave _write_isolating
                failures += 1
                if self._closing and failures > CLOSING_ATTEMPTS:
                    log.error("worker %s: giving up on %d outcome(s): %s", self._worker_id,
                              len(batch) + len(self._waiting), exc)
                    self._waiting = []
                    return
                self._waiting = batch + self._waiting
                # As in the fetcher: an ended session is retried at once.
                at_once = await self._connections.check_after(exc) and not retried_at_once
                retried_at_once = at_once
                delay = 0.05 if at_once else min(0.1 * 2 ** failures, RETRY_MAX_SECONDS)
                log.warning("worker %s: writing %d outcome(s) failed (%s); retrying in %.1fs",
                            self._worker_id, len(batch), exc, delay)
                await asyncio.sleep(delay)
            finally:
                self._writing = []
                self._update_room()

    def _limited(self, queues: set[str]) -> set[str]:
        """Those of ``queues`` the fetcher claims with claim_limited."""
        return set() if self.refill is None else self.refill.limited(queues)

    def _refills(self, batch: list[Outcome]) -> bool:
        """Whether writing ``batch`` claims for a limited queue (refill.py)."""
        return self.refill is not None and self.refill.claims_for(slot_freeing_queues(batch))

    async def _write_beside(self, batch: list[Outcome]) -> None:
        """Write ``batch`` beside the main write, then, while the main write is
        in flight, the outcomes waiting (if they refill too). A batch it fails
        to write goes back to the front of the queue, for the main loop's
        retries and their backoff."""
        try:
            while batch:
                self._writing_beside = batch
                try:
                    await self._write_isolating(batch)
                except Exception:
                    self._waiting = batch + self._waiting
                    raise
                finally:
                    self._writing_beside = []
                    self._update_room()
                batch = []
                if self._writing and self._waiting and self._refills(self._waiting[:MAX_BATCH]):
                    batch, self._waiting = self._waiting[:MAX_BATCH], self._waiting[MAX_BATCH:]
        except Exception as exc:  # back in the queue: the main loop's write raises it again
            log.warning("worker %s: writing %d outcome(s) beside the main write failed (%s); "
                        "retrying", self._worker_id, len(batch), exc)
        finally:
            self._beside = None
            self._ready.set()

    async def _write_isolating(self, batch: list[Outcome]) -> None:
        """Write a batch; if the database refuses it (not the connection: that is
        retried by the caller), split it so one bad outcome cannot hold back the
        rest. A single refused outcome is dropped: its lease lapses and the
        rescuer hands the job out again."""
        try:
            await self._write(batch)
        except psycopg.Error as exc:
            if isinstance(exc, psycopg.OperationalError) or is_unavailable(exc):
                raise  # the database, not the outcome: retried whole (read-only too)
            if len(batch) == 1:
                claimed = batch[0].running.claimed
                log.error("job %s on %r: the database refused its outcome (%s); it will be "
                          "rescued when its lease lapses", claimed.id, claimed.queue, exc)
                return
            middle = len(batch) // 2
            await self._write_isolating(batch[:middle])
            await self._write_isolating(batch[middle:])

    async def _write(self, batch: list[Outcome]) -> None:
        batch = await resolve_unsure(self._connections, self.q, batch)
        completions = [o for o in batch if isinstance(o, Completion)]
        failures = [o for o in batch if isinstance(o, Failure)]
        snoozes = [o for o in batch if isinstance(o, Snoozed)]
        queries = []
        if completions:
            queries.append(ops.complete_jobs(
                self.q, [c.as_json() for c in completions],
                self._limited({c.running.claimed.queue for c in completions})))
        if failures:
            queries.append(ops.fail_jobs(self.q, [f.as_json() for f in failures]))
        if snoozes:
            queries.append(ops.snooze_jobs(self.q, [s.as_json() for s in snoozes]))
        results, refilled = await self._execute(queries, batch) if queries else ([], set())
        written = ops.completed_ids(results[0]) if completions else set()
        if failures:
            written.update(ops.failed_ids(results[1 if completions else 0]))
        if snoozes:
            written.update(ops.snoozed_ids(results[-1]))
        written.update(
            o.running.claimed.id for o in batch if isinstance(o, Settled) and o.completed)
        missing = [c for c in completions if c.running.claimed.id not in written]
        if missing:
            # A retried batch whose first COMMIT landed unanswered finds its
            # rows already completed by the same lease token: written, not lost.
            statuses = await settled_by_lease(self._connections, self.q, missing)
            written.update(c.running.claimed.id for c in missing
                           if statuses.get(c.running.claimed.id) == c.status)
        self._report(batch, written, refilled)

    async def _execute(self, queries: list[Query],
                       batch: list[Outcome]) -> tuple[list[list[dict[str, Any]]], set[str]]:
        """Write the outcomes, with the claims of the limited queues whose
        slots they free when there are some (``refill.py``). Returns the
        outcomes' results and the queues so claimed."""
        if self.refill is not None and self._refills(batch):
            written = await self.refill.write(
                queries, slot_freeing_counts(batch),
                slot_freeing_counts((*self._writing, *self._writing_beside, *self._waiting)),
                beside=asyncio.current_task() is self._beside)
            if written is not None:
                return written
        return await self._connections.execute(*queries), set()

    def _report(self, batch: list[Outcome], written: set[str], refilled: set[str]) -> None:
        events: dict[str, list[str]] = {}
        errors: dict[str, dict[str, Any]] = {}
        queues: set[str] = set()
        for outcome in batch:
            claimed = outcome.running.claimed
            if claimed.id not in written:
                log.warning("job %s on %r: lease lost; its outcome was refused", claimed.id,
                            claimed.queue)
                continue
            queues.add(claimed.queue)
            if isinstance(outcome, Snoozed):  # no event: the job has not finished
                log.info("job %s on %r snoozed for %s s", claimed.id, claimed.queue,
                         outcome.seconds)
                self.written["snoozed"] += 1
                continue
            event = event_of(outcome)
            self.written[KINDS[event]] += 1
            if isinstance(outcome, Failure):
                errors[claimed.id] = outcome.error
            events.setdefault(event, []).append(claimed.id)
        for event, job_ids in events.items():
            self._events.emit_later(event, job_ids, errors)
        # A queue claimed in the outcomes' own transaction needs no claim after.
        if queues - refilled:
            self._freed(queues - refilled)
