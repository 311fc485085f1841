"""The worker: claims jobs, runs handlers, writes outcomes, keeps leases.

One asyncio implementation serves both clients (``PortQueue`` runs it on a
thread of its own). ``Worker`` only builds its parts, starts them and stops
them; each part is a file of its own that owns its state:

- ``fetcher``: the claim loop, woken per queue by ``demand``;
- ``runner``: one task per claimed job (timeout, signal, outcome);
- ``completer``: batched, fenced writes of outcomes, with a backlog cap;
- ``heartbeat``: extends every lease held, on a session of its own;
- ``listener``: the LISTEN session;
- ``events``: the callbacks' dispatch;
- ``connections``: the pool and the dedicated sessions under all of them;
- maintenance and the scheduler (``portqueue.maintenance``), acting from one
  worker at a time.

Stopping is an event (``stopping``) every loop waits on; cancellation only
follows it, for what did not end in time.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import Awaitable, Callable, Mapping

from portqueue import worker_operations as ops
from portqueue.availability import schema_missing
from portqueue.errors import SchemaNotMigrated
from portqueue.maintenance import maintenance_services, scheduler_services
from portqueue.maintenance.leader import Leadership, term_for
from portqueue.queries import Query
from portqueue.settings import Settings
from portqueue.worker.admission import admit
from portqueue.worker.completer import BACKLOG_PER_SLOT, Completer
from portqueue.worker.connections import DEFAULT_CONNECTIONS, MIN_CONNECTIONS, Connections
from portqueue.worker.demand import Demand
from portqueue.worker.events import EventDispatch
from portqueue.worker.fetcher import Fetcher
from portqueue.worker.handlers import HandlerConnections
from portqueue.worker.heartbeat import Heartbeat
from portqueue.worker.listener import LISTEN_HEALTH_SECONDS, Listener
from portqueue.worker.refill import Refill
from portqueue.worker.registry import DEFAULT_LEASE_SECONDS, QueueSpec, Registry
from portqueue.worker.runner import HANDLER_UNWIND_SECONDS, Runners
from portqueue.worker.shutdown import STOP_MARGIN_SECONDS, Release, StopBudget
from portqueue.worker.state import RunningJobs
from portqueue.worker.stopping import Stopping

__all__ = ["DEFAULT_CONNECTIONS", "HANDLER_UNWIND_SECONDS", "LISTEN_HEALTH_SECONDS",
           "MIN_CONNECTIONS", "STOP_MARGIN_SECONDS", "Worker"]

log = logging.getLogger("portqueue.worker")

class Worker:
    """One process's worker for the queues given; built by a client's ``start()``/``run()``."""

    def __init__(
        self,
        settings: Settings,
        registry: Registry,
        *,
        queues: Mapping[str, QueueSpec],
        poll_interval: float,
        grace_seconds: float,
        maintenance: bool,
        scheduler: bool = True,
        listen_check_seconds: float = LISTEN_HEALTH_SECONDS,
        for_drain: bool = False,
        connections: int = DEFAULT_CONNECTIONS,
    ) -> None:
        self.settings = settings
        # drain() claims through the fetcher itself, round by round: no claim
        # loop, and no listener (nothing to wake; cancels reach running jobs
        # through the heartbeat's touch).
        self.for_drain = for_drain
        self.budget = connections
        self.registry = registry
        self.queues = dict(queues)
        self.poll_interval = poll_interval
        self.grace_seconds = grace_seconds
        self.maintenance_enabled = maintenance
        self.scheduler_enabled = scheduler
        self.listen_check_seconds = listen_check_seconds
        self.id = str(uuid.uuid4())
        self.q = settings.queries
        self.fatal: BaseException | None = None
        self.on_fatal: Callable[[], None] = lambda: None
        # A signal that arrived before start() returned (see abandon_start).
        self._abandon_requested = False
        self._abandoned = False
        self._tasks: list[asyncio.Task[None]] = []
        self.leaderships: list[Leadership] = []
        # A worker consuming no queue (scheduler and maintenance only) heartbeats
        # its row as if it held the default lease.
        self.lease_seconds_min = min((spec.lease_seconds for spec in self.queues.values()),
                                     default=DEFAULT_LEASE_SECONDS)

    # --- life cycle ---

    async def start(self) -> None:
        """Returns once running, or once abandon_start() ended a wait for
        connections (then nothing runs and stop() has nothing to do)."""
        self.loop = asyncio.get_running_loop()
        # Two stages: ``stopping`` ends claims and the maintenance services at
        # once; ``closing``, set once the drain is over and the last outcomes
        # are written, ends the heartbeat (which keeps the leases of the jobs
        # still running meanwhile) and the listener (which delivers cancels).
        self.stopping = Stopping()
        self.closing = Stopping()
        self._abort = asyncio.Event()
        self.jobs = RunningJobs()
        self.demand = Demand({name: spec.concurrency for name, spec in self.queues.items()})
        if self._abandon_requested:
            self.stopping.set()
        self.connections = Connections(self.settings, self.budget)
        self.release = Release(self.connections, self.q, self.jobs, self.id)
        self.events = EventDispatch(self.registry, self.connections, self.q, self.id)
        total = sum(spec.concurrency for spec in self.queues.values())
        self.completer = Completer(self.connections, self.q, self.events, self.id,
                                   backlog_cap=max(BACKLOG_PER_SLOT * total, 1),
                                   freed=lambda queues: self.fetcher.freed(queues),
                                   running=lambda: len(self.jobs))
        self.handlers = HandlerConnections(self.settings, self.id)
        self.heartbeat = Heartbeat(
            self.connections, self.q, self.events, self.closing, self._registration(),
            self._heartbeat_interval(), self.id,
            # A worker consuming no queue has no claim session to share.
            session=self.connections.claims.use if self.queues else self.connections.pooled,
            leases=lambda: [*self.jobs.unsettled(), *self.completer.pending()])
        self.runners = Runners(self.settings, self.queues, self.jobs, self.demand,
                               self.handlers, self.completer.add, self.heartbeat.soon)
        self.fetcher = Fetcher(self.settings, self.connections, self.queues, self.demand,
                               self.stopping, self.completer.room, self.poll_interval, self.id,
                               self.runners.start,
                               lambda ids: self.events.emit_later("job_started", ids),
                               unwritten=self.completer.unwritten)
        self.completer.refill = Refill(self.connections, self.fetcher, self.id)
        listens = not (self.settings.poll_only or self.for_drain)
        if not await admit(self.connections, self.id, claims=bool(self.queues),
                               listener=listens, stopping=self.stopping):
            log.info("worker %s: stopped while waiting for connections", self.id)
            self._abandoned = True
            return
        await self._register()
        # A scheduler/maintenance-only worker claims nothing; drain() claims itself.
        if self.queues and not self.for_drain:
            self._spawn(self.fetcher.run(), "fetcher")
        self._completing = asyncio.create_task(self.completer.run(), name="portqueue-completer")
        self._spawn(self.heartbeat.run(), "heartbeat")
        if not self.settings.poll_only and not self.for_drain:
            listener = Listener(self.connections, self.q, self.demand, self.jobs, self.closing,
                                self.id, self.listen_check_seconds)
            self._spawn(listener.run(), "listener")
        # One worker at a time runs each role's services (maintenance/leader.py).
        pool = self.connections.pool
        roles = {"maintenance": maintenance_services(
                     self.settings, pool, lambda ids: self.events.emit_later("job_rescued", ids))
                 if self.maintenance_enabled else [],
                 "scheduler": scheduler_services(self.settings, pool)
                 if self.scheduler_enabled else []}
        for role, services in roles.items():
            if services:
                leadership = Leadership(self.settings, self.connections.execute, self.id, role,
                                        term_for(self.lease_seconds_min))
                self.leaderships.append(leadership)
                self._spawn(leadership.keep(self.stopping, self.stopping.sleep),
                            f"{role}-leadership")
            for service in services:
                service.leadership = leadership
                self._spawn(service.run(self.stopping, self.stopping.sleep), service.name)
        log.info("worker %s started: queues=%s instance_key=%s connections=%d", self.id,
                 {name: spec.concurrency for name, spec in self.queues.items()},
                 self.settings.instance_key, self.budget)

    def abandon_start(self) -> None:
        """Thread-safe: a stop was asked for before start() returned; if
        start() is still waiting for connections, it gives up and returns."""
        self._abandon_requested = True
        loop = getattr(self, "loop", None)
        if loop is not None and hasattr(self, "stopping"):
            loop.call_soon_threadsafe(self.stopping.set)

    async def _register(self) -> None:
        try:
            await self.connections.execute(*[ops.upsert_queue(self.q, spec.queue_row())
                                             for spec in self.queues.values()])
            declared = [ops.declare_queue_limits(self.q, spec.queue, spec.declared_limits())
                        for spec in self.queues.values() if spec.declared_limits()]
            if declared:
                await self.connections.execute(*declared)
            await self.connections.execute(self._registration())
        except BaseException as error:
            # A failed start leaves nothing running: the open pool's tasks
            # would be "destroyed but pending" at interpreter exit.
            await self.connections.close()
            if schema_missing(error):
                raise SchemaNotMigrated(self.settings.schema) from error
            raise

    def _heartbeat_interval(self) -> float:
        interval = max(self.lease_seconds_min / 3, 0.05)
        if self.settings.poll_only:
            # No cancel NOTIFY without LISTEN: the touch is how cancels arrive.
            interval = min(interval, self.poll_interval)
        return interval

    def _registration(self) -> Query:
        return ops.register_worker(
            self.q, worker_id=self.id, instance_key=self.settings.instance_key,
            hostname=socket.gethostname(), pid=os.getpid(), queues=list(self.queues),
            concurrency=sum(spec.concurrency for spec in self.queues.values()))

    def _spawn(self, coroutine: Awaitable[None], name: str) -> None:
        async def guarded() -> None:
            try:
                await coroutine
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # a loop died: the worker cannot go on
                log.exception("worker %s: %s failed", self.id, name)
                self.fatal = exc
                self._abort.set()
                self.stopping.set()
                self.closing.set()
                self.on_fatal()

        self._tasks.append(asyncio.create_task(guarded(), name=f"portqueue-{name}"))

    async def stop(self, *, abort: bool = False) -> None:
        """Stop claiming; let running handlers finish (up to grace_seconds), or
        with ``abort`` (or on request_abort) set their signals and release them."""
        if self._abandoned:
            return
        if not self.stopping():
            log.info("worker %s stopping (%s)", self.id, "abort" if abort else "drain")
        self.stopping.set()
        if abort:
            self._abort.set()
        budget = StopBudget(self.connections, self.id, self.grace_seconds)
        # A claim in flight commits and starts its jobs' runners before the
        # drain looks at what runs (see Fetcher.claiming).
        await budget.within(self._claim_settled(), "the claim in flight")
        await self.release.drain(self._abort, budget.grace_left())
        # What still runs now is released (settled here, before any await).
        self.release.settle()
        await budget.within(self.release.release(), "releasing running jobs")
        await self.runners.cancel_async_handlers()
        await budget.within(self.handlers.end_stuck_sync_sessions(self.connections),
                            "ending stuck handler sessions")
        # The completer finishes what it is writing and everything queued,
        # then exits: cancelling it mid-write would lose finished outcomes.
        self.completer.close()
        await budget.within(self._completing, "writing outcomes")
        self.closing.set()
        await budget.end_loops(self._tasks)
        await self.fetcher.close()  # its own, unless its loop never ran
        for leadership in self.leaderships:
            await budget.within(leadership.resign(), "handing on " + leadership.role)
        await budget.within(
            self.connections.execute(ops.unregister_worker(self.q, self.id)), "unregistering")
        await self.connections.close()
        await self.handlers.close()
        self.runners.close()
        self.events.close()
        log.info("worker %s stopped", self.id)

    async def _claim_settled(self) -> None:
        # The completer's claims in flight too (none starts once stopping).
        await self.fetcher.refills_settled.wait()
        async with self.fetcher.claiming:
            if self._abort.is_set():
                # Settled in the same step the claim's runners started in, so
                # none of its jobs' handlers gets to write an outcome first.
                self.release.settle()

    def request_abort(self) -> None:
        """Thread-safe: turn a drain in progress into an abort."""
        self.loop.call_soon_threadsafe(self._abort.set)
