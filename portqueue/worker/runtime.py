"""The worker: claims jobs, runs handlers, writes outcomes, keeps leases.

One asyncio implementation serves both clients (``PortQueue`` runs it on a
thread of its own). Its parts, each a task on the worker's loop:

- fetcher: claims up to the free slots in one statement when woken (NOTIFY,
  a freed slot after a full claim, or the poll interval);
- runners: one per claimed job; sync handlers run in a thread pool;
- completer: writes completions and failures in batches, fenced;
- heartbeat: one statement extends every running lease and carries progress,
  attrs and cancel requests, on a connection handlers cannot starve;
- listener: a dedicated LISTEN connection, re-established with backoff;
- maintenance: the lease rescuer, acting from one worker at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import json
import logging
import os
import socket
import sys
import threading
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from portqueue import operations
from portqueue.availability import is_unavailable, session_lost
from portqueue.driver import AsyncCursorKeepingConnection, execute_async, execute_sync, fetch_async
from portqueue.maintenance import maintenance_services, scheduler_services
from portqueue.metrics import hooks
from portqueue.queries import Query
from portqueue.settings import Settings
from portqueue.worker.demand import Demand
from portqueue.worker.job import AsyncJob, Job, JobReport
from portqueue.worker.outcomes import (
    Completion,
    Failure,
    Outcome,
    Settled,
    Unsure,
    completion,
    failure,
    unsettled,
)
from portqueue.worker.registry import DEFAULT_LEASE_SECONDS, QueueSpec, Registry
from portqueue.worker.signal import SignalState
from portqueue.worker.state import Claimed, Running

log = logging.getLogger("portqueue.worker")

RECONNECT_MAX_SECONDS = 10.0
HANDLER_UNWIND_SECONDS = 5.0
# A LISTEN connection quiet this long is probed with SELECT 1, which must
# answer within a third of it (psycopg then waits up to 5 s more for the
# server to cancel it): a black-holed connection is replaced within about
# 4/3 of this plus 5 s, instead of being waited on forever.
LISTEN_HEALTH_SECONDS = 15.0


def _runner_task(loop: asyncio.AbstractEventLoop,
                 coroutine: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
    """A job's runner task. On Python 3.12+ it starts eagerly: a handler that
    finishes without suspending (a fast one) completes right here, without a
    trip through the loop's ready queue; one that suspends continues as any
    task would."""
    if sys.version_info >= (3, 12):
        return asyncio.Task(coroutine, loop=loop, eager_start=True)
    return loop.create_task(coroutine)


async def _close_quietly(conn: psycopg.AsyncConnection[Any] | None) -> None:
    """Close a connection of the worker's own that may already be broken."""
    if conn is not None:
        with contextlib.suppress(psycopg.Error, OSError):
            await conn.close()


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
    ) -> None:
        self.settings = settings
        self.registry = registry
        self.queues = dict(queues)
        self.poll_interval = poll_interval
        self.grace_seconds = grace_seconds
        self.maintenance_enabled = maintenance
        self.scheduler_enabled = scheduler
        self.listen_check_seconds = listen_check_seconds
        self.id = str(uuid.uuid4())
        self.q = settings.queries
        self.running: dict[str, Running] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._runners: set[asyncio.Task[None]] = set()
        self._outcomes: list[Outcome] = []
        self._stopping = False
        self._closing = False
        self._background: set[asyncio.Task[None]] = set()
        # Async handler calls still running, including ones past their timeout.
        self._async_calls: set[asyncio.Future[Any]] = set()
        self.fatal: BaseException | None = None
        self.on_fatal: Callable[[], None] = lambda: None
        self._sync_pool: ConnectionPool | None = None
        self._sync_pool_lock = threading.Lock()
        self._handler_pool: AsyncConnectionPool | None = None
        self._fetcher_conn: psycopg.AsyncConnection[Any] | None = None
        # Connections async handlers hold now (job.transaction()): closed at
        # stop if their handler refuses to end (see _cancel_async_handlers).
        self._handler_connections: set[psycopg.AsyncConnection[Any]] = set()
        # Server pids of the connections sync handlers hold now (same reason;
        # see _end_stuck_sync_sessions). Guarded by _sync_pool_lock.
        self._sync_handler_pids: set[int] = set()
        # A worker consuming no queue (scheduler and maintenance only) heartbeats
        # its row as if it held the default lease.
        self.lease_seconds_min = min((spec.lease_seconds for spec in self.queues.values()),
                                     default=DEFAULT_LEASE_SECONDS)

    # --- life cycle ---

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.demand = Demand({name: spec.concurrency for name, spec in self.queues.items()})
        self._touch_now = asyncio.Event()
        self._outcome_ready = asyncio.Event()
        self._idle = asyncio.Event()
        self._abort = asyncio.Event()
        # Held by the fetcher from a claim until its runners exist; stop()
        # takes it before draining (see stop).
        self._claiming = asyncio.Lock()
        threads = sum(spec.concurrency for spec in self.queues.values() if not spec.is_async)
        self._thread_count = max(threads, 1) + 4
        self._threads = self._thread_pool()
        # Sync event callbacks run here, one at a time and in order, never on
        # the loop: a slow one would stall claims, heartbeats and completions.
        self._callback_thread = ThreadPoolExecutor(max_workers=1,
                                                   thread_name_prefix="portqueue-callbacks")
        self.pool = AsyncConnectionPool(
            # The completer, event reads and the maintenance services (claims
            # have a connection of their own); handlers never use it, so none
            # of these can be starved by them. Autocommit: completions are
            # single statements, one round trip each; what needs a
            # transaction opens one.
            self.settings.dsn, min_size=1, max_size=7, open=False,
            kwargs={**self.settings.connection_kwargs("worker"), "autocommit": True},
            connection_class=AsyncCursorKeepingConnection, name="portqueue:worker")
        await self.pool.open(wait=True, timeout=30)
        await self._execute(*[self.q("upsert_queue", **spec.queue_row())
                              for spec in self.queues.values()])
        await self._execute(self._registration())
        if self.queues:  # a scheduler/maintenance-only worker claims nothing
            await self._fetcher()
        self._spawn(self._fetch_loop(), "fetcher")
        self._completer = asyncio.create_task(self._complete_loop(), name="portqueue-completer")
        self._spawn(self._heartbeat_loop(), "heartbeat")
        if not self.settings.poll_only:
            self._spawn(self._listen_loop(), "listener")
        services = []
        if self.maintenance_enabled:
            services += maintenance_services(self.settings, self.pool)
        if self.scheduler_enabled:
            services += scheduler_services(self.settings, self.pool)
        for service in services:
            self._spawn(service.run(lambda: self._stopping), service.name)
        log.info("worker %s started: queues=%s instance_key=%s", self.id,
                 {name: spec.concurrency for name, spec in self.queues.items()},
                 self.settings.instance_key)

    def _registration(self) -> Query:
        return self.q(
            "register_worker", id=self.id, instance_key=self.settings.instance_key,
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
                self.demand.changed.set()
                self.on_fatal()

        self._tasks.append(asyncio.create_task(guarded(), name=f"portqueue-{name}"))

    async def stop(self, *, abort: bool = False) -> None:
        """Stop claiming; let running handlers finish (up to grace_seconds), or
        with ``abort`` (or on request_abort) set their signals and release them."""
        if not self._stopping:
            log.info("worker %s stopping (%s)", self.id, "abort" if abort else "drain")
        self._stopping = True
        self.demand.changed.set()
        if abort:
            self._abort.set()
        # A claim in flight commits and starts its jobs' runners before the
        # drain looks at what runs; otherwise its jobs would be left active,
        # never run, until their leases lapsed and the rescuer spent an attempt.
        async with self._claiming:
            pass
        await self._drain()
        await self._cancel_async_handlers()
        await self._end_stuck_sync_sessions()
        # The completer finishes what it is writing and everything queued,
        # then exits: cancelling it mid-write would lose finished outcomes.
        self._closing = True
        self._outcome_ready.set()
        await self._completer
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._close_fetcher()  # the fetch loop's own, unless it never ran
        with contextlib.suppress(psycopg.Error):
            await self._execute(self.q("unregister_worker", id=self.id))
        await self.pool.close()
        if self._handler_pool is not None:
            await self._handler_pool.close()
        if self._sync_pool is not None:
            await asyncio.to_thread(self._sync_pool.close)
        self._threads.shutdown(wait=False, cancel_futures=True)
        self._callback_thread.shutdown(wait=False, cancel_futures=True)
        log.info("worker %s stopped", self.id)

    def request_abort(self) -> None:
        """Thread-safe: turn a drain in progress into an abort."""
        self.loop.call_soon_threadsafe(self._abort.set)

    async def _drain(self) -> None:
        if self.running and not self._abort.is_set():
            idle = asyncio.create_task(self._idle.wait())
            abort = asyncio.create_task(self._abort.wait())
            self._idle.clear()
            if self.running:
                await asyncio.wait({idle, abort}, timeout=self.grace_seconds,
                                   return_when=asyncio.FIRST_COMPLETED)
            idle.cancel()
            abort.cancel()
        if self.running:
            await self._release_running()

    async def _cancel_async_handlers(self) -> None:
        """Async handlers still running after the drain (their jobs released or
        timed out) are cancelled and given a moment to unwind, so a handler's
        open job.transaction() is rolled back and its connection returned
        before the pools close: a destroyed task would leave the transaction
        open on the server, holding its locks."""
        calls = [call for call in self._async_calls if not call.done()]
        for call in calls:
            call.cancel()
        if calls:
            await asyncio.wait(calls, timeout=HANDLER_UNWIND_SECONDS)
        stuck = [call for call in calls if not call.done()]
        if stuck:
            # A handler that swallows its cancellation keeps running, and the
            # pool will not close a connection in use: close its connections
            # here, so the server rolls its transaction back and frees its
            # locks now, not when the process exits (or never, in-process).
            log.warning("worker %s: %d async handler(s) ignored cancellation; closing "
                        "%d connection(s) they hold", self.id, len(stuck),
                        len(self._handler_connections))
            for conn in list(self._handler_connections):
                await conn.close()

    async def _end_stuck_sync_sessions(self) -> None:
        """Sync handlers still holding a job.transaction() connection now
        (their jobs released or timed out) are stuck where no signal reaches:
        the server ends their sessions (see end_sessions in sql/worker.sql)."""
        with self._sync_pool_lock:
            pids = sorted(self._sync_handler_pids)
        # Behind PgBouncer (poll_only) a connection's backend pid is not the
        # server session's, and ending it could end someone else's session.
        if pids and not self.settings.poll_only:
            log.warning("worker %s: %d sync handler(s) still hold a connection; ending "
                        "their sessions", self.id, len(pids))
            with contextlib.suppress(psycopg.Error):
                await self._execute(self.q("end_sessions", pids=pids))

    async def _release_running(self) -> None:
        released = [r for r in self.running.values() if not r.settled]
        for running in released:
            running.settled = True
            running.state.set("shutdown")
        if released:
            payload = [{"id": r.claimed.id, "lease_token": r.claimed.lease_token} for r in released]
            rows = await self._execute(self.q("release_jobs", jobs=json.dumps(payload)))
            log.info("worker %s released %d running job(s) to pending", self.id, len(rows[-1]))

    # --- database ---

    async def _execute(self, *queries: Query) -> list[list[dict[str, Any]]]:
        """Run queries on a worker connection (never a handler's): one alone, in
        autocommit (one round trip); several in one transaction."""
        async with self.pool.connection() as conn:
            if len(queries) == 1:
                return [await execute_async(conn, queries[0])]
            async with conn.transaction():
                return [await execute_async(conn, query) for query in queries]

    async def _check_pool_after(self, error: BaseException) -> bool:
        """After a restart, a failover or terminated sessions, the pool's idle
        connections are dead too, and each would fail the next claim or write
        (and add a backoff step) in turn: test them all now, once, instead.
        True when ``error`` ended a session (worth retrying at once)."""
        if is_unavailable(error):
            with contextlib.suppress(Exception):
                await self.pool.check()
        return session_lost(error)

    async def _connect(self, role: str) -> psycopg.AsyncConnection[Any]:
        connecting = asyncio.ensure_future(psycopg.AsyncConnection.connect(
            self.settings.dsn, autocommit=True, **self.settings.connection_kwargs(role)))
        try:
            return await asyncio.shield(connecting)
        except asyncio.CancelledError:
            # stop() cancels the loop that is connecting. Cancelled mid-connect,
            # psycopg leaves a connection that completes to the garbage
            # collector, and its server session open until then (seen: a
            # worker stopped right after start kept its LISTEN session). So
            # the connect runs to its end here and what it opened is closed.
            with contextlib.suppress(psycopg.Error, OSError):
                await (await connecting).close()
            raise

    async def _sleep_or_stop(self, seconds: float) -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._abort.wait(), seconds)

    # --- fetcher ---

    async def _fetch_loop(self) -> None:
        try:
            await self._fetch_until_stopped()
        finally:
            await self._close_fetcher()

    async def _fetcher(self) -> psycopg.AsyncConnection[Any]:
        # Claims run on a connection of their own, not one from the pool: no
        # checkout per claim, and always the same warm backend (the pool hands
        # its idle connections out in turn). About a tenth of an idle worker's
        # commit-to-start latency (docs/performance.md).
        if self._fetcher_conn is None or self._fetcher_conn.closed:
            self._fetcher_conn = await self._connect("fetcher")
        return self._fetcher_conn

    async def _close_fetcher(self) -> None:
        conn, self._fetcher_conn = self._fetcher_conn, None
        await _close_quietly(conn)

    async def _fetch_until_stopped(self) -> None:
        failures = 0
        retried_at_once = False
        demand = self.demand
        next_poll = self.loop.time() + self.poll_interval
        while not self._stopping:
            demand.changed.clear()
            if not demand.ready():
                # Nothing to claim until a NOTIFY names a queue with a free
                # slot, a backlogged queue frees one, or the poll is due.
                wait = next_poll - self.loop.time()
                if wait > 0:
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(demand.changed.wait(), wait)
                    continue
                demand.want_all()
                next_poll = self.loop.time() + self.poll_interval
                continue
            asked = demand.take()
            try:
                async with self._claiming:
                    if self._stopping:
                        return
                    claimed, claimed_per_queue = await self._claim(asked)
                    traced = hooks.tracing_on()
                    for row in claimed:
                        self._start(row, traced)
                    if claimed:
                        # One event (and one snapshot read) per claim, not per job.
                        self._emit_later("job_started", [c.id for c in claimed])
                failures = 0
                retried_at_once = False
            except psycopg.Error as exc:
                # The claim's session may be gone (a restart, a failover, a
                # terminated backend): the next claim opens a new one, and is
                # tried at once rather than backed off as if the database
                # still refused, once in a row. The pool (completions) is
                # checked meanwhile.
                for queue in asked:
                    demand.want(queue)
                await self._close_fetcher()
                at_once = await self._check_pool_after(exc) and not retried_at_once
                retried_at_once = at_once
                failures += 0 if at_once else 1
                delay = 0.05 if at_once else min(0.1 * 2 ** failures, RECONNECT_MAX_SECONDS)
                log.warning("worker %s: claim failed (%s); retrying in %.1fs",
                            self.id, exc, delay)
                await self._sleep_or_stop(delay)
                continue
            # A queue that filled its free slots may have more waiting: it is
            # claimed again as soon as a slot of it frees, not at the next
            # NOTIFY or poll, whatever the other queues returned.
            demand.claimed(asked, claimed_per_queue)

    async def _claim(self, free: dict[str, int]) -> tuple[list[Claimed], Counter[str]]:
        """Claim up to the free slots; also how many rows each queue yielded
        (expired ones included: they used a slot of this claim)."""
        names = [name for name, slots in free.items() if slots > 0]
        query = self.q(
            "claim",
            queues=names,
            slots=[free[name] for name in names],
            lease_seconds=[self.queues[name].lease_seconds for name in names],
            instance_key=self.settings.instance_key,
            worker_id=self.id,
        )
        rows = await fetch_async(await self._fetcher(), query, Claimed.rows)
        started = []
        for claimed in rows:
            if claimed.status == "expired":
                log.info("job %s on %r expired before it could start", claimed.id,
                         claimed.queue)
                continue
            started.append(claimed)
        return started, Counter(claimed.queue for claimed in rows)

    def _start(self, claimed: Claimed, traced: bool) -> None:
        spec = self.queues[claimed.queue]
        state = SignalState()
        if claimed.cancel_requested:
            state.set("cancelled")
        running = Running(claimed, spec, state, JobReport(self._touch_soon), traced)
        self.running[claimed.id] = running
        self.demand.started(claimed.queue)
        task = _runner_task(self.loop, self._run(running))
        if task.done():
            # Finished eagerly, here: nothing to keep or cancel, and a done
            # callback on a done task would cost two trips through the loop.
            return
        self._runners.add(task)
        task.add_done_callback(self._runners.discard)
        if spec.is_async and self._timeout(running) is None:
            # Runs its handler in its own task (see _call_with_timeout): the
            # task is the call stop() cancels if it outlives the drain.
            self._async_calls.add(task)
            task.add_done_callback(self._async_calls.discard)

    def _touch_soon(self) -> None:
        self.loop.call_soon_threadsafe(self._touch_now.set)

    # --- runners ---

    async def _run(self, running: Running) -> None:
        try:
            outcome = await self._call_with_timeout(running)
        finally:
            self.running.pop(running.claimed.id, None)
            if not self.running:
                self._idle.set()
            self.demand.finished(running.claimed.queue)
        if outcome is not None and not running.settled:
            running.settled = True
            self._outcomes.append(outcome)
            self._outcome_ready.set()

    @staticmethod
    def _timeout(running: Running) -> int | None:
        # The job's own timeout, else this worker's declared one: a job added
        # before any worker wrote the queue's defaults stored none, and would
        # otherwise run unbounded under a handler declared with a timeout.
        return running.claimed.timeout_seconds or running.spec.timeout_seconds

    async def _call_with_timeout(self, running: Running) -> Outcome | None:
        timeout = self._timeout(running)
        if timeout is None:
            # Nothing to enforce: the handler runs in the runner's own task,
            # sparing a second task and a wait per job on the hot path.
            if running.spec.is_async:
                return await self._invoke_async(running)
            return await self.loop.run_in_executor(self._threads, self._invoke_sync, running)
        if running.spec.is_async:
            call: asyncio.Future[Outcome] = asyncio.ensure_future(self._invoke_async(running))
            self._async_calls.add(call)
            call.add_done_callback(self._async_calls.discard)
        else:
            call = asyncio.ensure_future(self.loop.run_in_executor(
                self._threads, self._invoke_sync, running))
        done, _ = await asyncio.wait({call}, timeout=timeout)
        if call in done:
            return call.result()
        # The attempt fails now and its slot is freed, whether or not the
        # handler heeds its signal; its late result is fenced out.
        running.state.set("timeout")
        if running.spec.is_async:
            call.cancel()
        else:
            call.add_done_callback(lambda _: None)
            self._retire_thread_pool()
        return failure(running, TimeoutError(
            f"handler exceeded timeout_seconds={timeout}"))

    def _thread_pool(self) -> ThreadPoolExecutor:
        return ThreadPoolExecutor(max_workers=self._thread_count,
                                  thread_name_prefix="portqueue-handler")

    def _retire_thread_pool(self) -> None:
        """A timed-out sync handler keeps its thread until it returns. Later jobs
        get a fresh pool: enough stuck handlers would otherwise hold every thread,
        and each new job would wait in the queue and time out, never run. The
        retired pool ends as its threads finish."""
        retired, self._threads = self._threads, self._thread_pool()
        retired.shutdown(wait=False)

    def _invoke_sync(self, running: Running) -> Outcome:
        job = Job(running.claimed, running.report, running.state, self._sync_connection)
        running.job = job
        try:
            with hooks.running(running.claimed, running.traced):  # the run span, when tracing
                result = running.spec.handler(job)
        except BaseException as exc:  # SystemExit, KeyboardInterrupt too: never left active
            job.close_transaction(commit=False)
            return failure(running, exc)
        outcome = completion(running, result, self.settings.max_payload_bytes)
        if job.open_transaction is None or not isinstance(outcome, Completion):
            job.close_transaction(commit=False)
            return outcome
        completed = False
        try:
            (row,) = execute_sync(job.open_transaction, self._complete_query([outcome]))
            completed = bool(row["ids"])
            job.close_transaction(commit=completed)
        except BaseException as exc:
            job.close_transaction(commit=False)
            return unsettled(running, outcome, exc, committing=completed)
        return Settled(running, completed=completed, status=outcome.status)

    async def _invoke_async(self, running: Running) -> Outcome:
        job = AsyncJob(running.claimed, running.report, running.state, self._async_connection)
        running.job = job
        try:
            with hooks.running(running.claimed, running.traced):
                result = await running.spec.handler(job)
        except BaseException as exc:  # CancelledError included: recorded, never left active
            await job.close_transaction(commit=False)
            return failure(running, exc)
        outcome = completion(running, result, self.settings.max_payload_bytes)
        if job.open_transaction is None or not isinstance(outcome, Completion):
            await job.close_transaction(commit=False)
            return outcome
        completed = False
        try:
            (row,) = await execute_async(job.open_transaction, self._complete_query([outcome]))
            completed = bool(row["ids"])
            await job.close_transaction(commit=completed)
        except BaseException as exc:
            await job.close_transaction(commit=False)
            return unsettled(running, outcome, exc, committing=completed)
        return Settled(running, completed=completed, status=outcome.status)

    def _sync_connection(self) -> contextlib.AbstractContextManager[psycopg.Connection[Any]]:
        # Created on first use, from a handler thread: only handlers use it.
        # Locked: handlers entering job.transaction() together would each
        # create a pool, and all but one would leak their connections.
        with self._sync_pool_lock:
            if self._sync_pool is None:
                self._sync_pool = ConnectionPool(
                    self.settings.dsn, min_size=0, max_size=self.settings.pool_max_size,
                    kwargs=self.settings.connection_kwargs("handler"), name="portqueue:handler",
                    open=True, check=ConnectionPool.check_connection)
        return self._tracked_sync_connection(self._sync_pool)

    @contextlib.contextmanager
    def _tracked_sync_connection(self, pool: ConnectionPool) -> Iterator[psycopg.Connection[Any]]:
        """A sync handler's connection, its server pid known while checked out."""
        with pool.connection() as conn:
            pid = conn.info.backend_pid
            with self._sync_pool_lock:
                self._sync_handler_pids.add(pid)
            try:
                yield conn
            finally:
                with self._sync_pool_lock:
                    self._sync_handler_pids.discard(pid)

    def _async_connection(
        self,
    ) -> contextlib.AbstractAsyncContextManager[psycopg.AsyncConnection[Any]]:
        return self._async_handler_connection()

    @contextlib.asynccontextmanager
    async def _async_handler_connection(self) -> Any:
        if self._handler_pool is None:
            self._handler_pool = AsyncConnectionPool(
                self.settings.dsn, min_size=0, max_size=self.settings.pool_max_size,
                open=False, kwargs=self.settings.connection_kwargs("handler"),
                name="portqueue:handler",
                # Checked on checkout (one empty query): after a restart or a
                # failover a pooled connection is dead, and handing it to a
                # handler would fail its attempt and run it again.
                check=AsyncConnectionPool.check_connection)
            await self._handler_pool.open()
        async with self._handler_pool.connection() as conn:
            self._handler_connections.add(conn)
            try:
                yield conn
            finally:
                self._handler_connections.discard(conn)

    # --- completer ---

    def _complete_query(self, completions: list[Completion]) -> Query:
        return self.q("complete_jobs", jobs="[" + ",".join(c.as_json() for c in completions) + "]")

    async def _complete_loop(self) -> None:
        while True:
            await self._outcome_ready.wait()
            self._outcome_ready.clear()
            await self._flush_outcomes()
            if self._closing and not self._outcomes:
                return

    async def _flush_outcomes(self) -> None:
        """Write every waiting outcome: at most two statements, one transaction.
        Outcomes arriving during a write go in the next one, so batches grow
        with load while an idle worker writes each outcome at once."""
        failures = 0
        retried_at_once = False
        while self._outcomes:
            batch, self._outcomes = self._outcomes, []
            try:
                await self._write_isolating(batch)
                failures = 0
            except psycopg.Error as exc:  # only retryable ones leave _write_isolating
                failures += 1
                if self._closing and failures > 5:
                    # Shutting down with no database: the leases will lapse
                    # and the rescuer hands these jobs out again.
                    log.error("worker %s: giving up on %d outcome(s): %s", self.id,
                              len(batch), exc)
                    return
                self._outcomes = batch + self._outcomes
                # As in the fetcher: an ended session is retried at once.
                at_once = await self._check_pool_after(exc) and not retried_at_once
                retried_at_once = at_once
                delay = 0.05 if at_once else min(0.1 * 2 ** failures, RECONNECT_MAX_SECONDS)
                log.warning("worker %s: writing %d outcome(s) failed (%s); retrying in %.1fs",
                            self.id, len(batch), exc, delay)
                await asyncio.sleep(delay)

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
        batch = await self._resolve_unsure(batch)
        completions = [o for o in batch if isinstance(o, Completion)]
        failures = [o for o in batch if isinstance(o, Failure)]
        queries = []
        if completions:
            queries.append(self._complete_query(completions))
        if failures:
            jobs = "[" + ",".join(f.as_json() for f in failures) + "]"
            queries.append(self.q("fail_jobs", jobs=jobs))
        results = await self._execute(*queries) if queries else []
        written = set(results[0][0]["ids"]) if completions else set()
        if failures:
            written.update(str(row["id"]) for row in results[-1])
        written.update(
            o.running.claimed.id for o in batch if isinstance(o, Settled) and o.completed)
        missing = [c for c in completions if c.running.claimed.id not in written]
        if missing:
            # A retried batch whose first COMMIT landed unanswered finds its
            # rows already completed by the same lease token: written, not lost.
            statuses = await self._settled_by_lease(missing)
            written.update(c.running.claimed.id for c in missing
                           if statuses.get(c.running.claimed.id) == c.status)
        self._report(batch, written)

    async def _settled_by_lease(self, outcomes: list[Completion] | list[Unsure]) -> dict[str, str]:
        """The status of each job whose row still holds the outcome's lease token."""
        payload = [{"id": o.running.claimed.id, "lease_token": o.running.claimed.lease_token}
                   for o in outcomes]
        (rows,) = await self._execute(self.q("settled_by_lease", jobs=json.dumps(payload)))
        return {str(row["id"]): row["status"] for row in rows}

    async def _resolve_unsure(self, batch: list[Outcome]) -> list[Outcome]:
        """Turn each unanswered transactional COMMIT into what happened: the
        completion landed (settled), it did not (the attempt failed, nothing
        of it written), or the lease was lost meanwhile."""
        unsure = [o for o in batch if isinstance(o, Unsure)]
        if not unsure:
            return batch
        statuses = await self._settled_by_lease(unsure)
        resolved: list[Outcome] = [o for o in batch if not isinstance(o, Unsure)]
        for outcome in unsure:
            status = statuses.get(outcome.running.claimed.id)
            if status == "active":
                resolved.append(failure(outcome.running, outcome.error))
            else:
                landed = status == outcome.completion.status
                resolved.append(Settled(outcome.running, completed=landed,
                                        status=outcome.completion.status))
        return resolved

    def _report(self, batch: list[Outcome], written: set[str]) -> None:
        events: dict[str, list[str]] = {}
        errors: dict[str, dict[str, Any]] = {}
        for outcome in batch:
            job_id = outcome.running.claimed.id
            claimed = outcome.running.claimed
            if job_id not in written:
                log.warning("job %s on %r: lease lost; its outcome was refused", job_id,
                            claimed.queue)
                continue
            if isinstance(outcome, Failure) and outcome.status == "cancelled":
                errors[job_id] = outcome.error
                event = "job_cancelled"
                log.info("job %s on %r cancelled (raised %s after its cancel signal)", job_id,
                         claimed.queue, outcome.error["type"])
            elif isinstance(outcome, Failure):
                errors[job_id] = outcome.error
                event = "job_retrying" if outcome.retry else "job_failed"
                level = logging.WARNING if outcome.retry else logging.ERROR
                log.log(level, "job %s on %r failed (attempt %d/%d%s): %s: %s", job_id,
                        claimed.queue, claimed.attempt, claimed.max_attempts,
                        ", will retry" if outcome.retry else "", outcome.error["type"],
                        outcome.error["message"])
            elif isinstance(outcome, Completion) and outcome.status == "cancelled":
                event = "job_cancelled"
            elif isinstance(outcome, Settled) and outcome.status == "cancelled":
                # A job.transaction() handler that returned after its cancel
                # signal: its completion wrote status 'cancelled'.
                event = "job_cancelled"
            else:
                event = "job_completed"
            events.setdefault(event, []).append(job_id)
        for event, job_ids in events.items():
            self._emit_later(event, job_ids, errors)

    # --- events ---

    def _emit_later(self, event: str, job_ids: list[str],
                    errors: Mapping[str, dict[str, Any]] | None = None) -> None:
        callbacks = self.registry.callbacks(event)
        if callbacks:
            task = asyncio.create_task(self._emit(event, callbacks, job_ids, errors or {}))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _emit(self, event: str, callbacks: list[Callable[..., Any]], job_ids: list[str],
                    errors: Mapping[str, dict[str, Any]]) -> None:
        try:
            async with self.pool.connection() as conn:
                rows = await execute_async(conn, self.q("jobs_by_id", job_ids=job_ids))
        except psycopg.Error as exc:
            # The connection broke under the snapshot read: the jobs' outcomes
            # are written, only their callbacks are missed; say so rather
            # than leave an unretrieved task exception.
            log.warning("worker %s: %s callbacks skipped for %d job(s): %s", self.id, event,
                        len(job_ids), exc)
            return
        for row in rows:
            snapshot = operations.job_snapshot(row)
            args: tuple[Any, ...] = (snapshot,)
            if event in ("job_failed", "job_retrying"):
                args = (snapshot, errors.get(snapshot.job_id))
            for callback in callbacks:
                try:
                    if inspect.iscoroutinefunction(callback):
                        await callback(*args)
                        continue
                    result = await self.loop.run_in_executor(
                        self._callback_thread, functools.partial(callback, *args))
                    if asyncio.iscoroutine(result):
                        await result
                except Exception:
                    log.exception("%s callback %r raised", event, callback)

    # --- heartbeat ---

    async def _heartbeat_loop(self) -> None:
        interval = max(self.lease_seconds_min / 3, 0.05)
        if self.settings.poll_only:
            # No cancel NOTIFY without LISTEN: the touch is how cancels arrive.
            interval = min(interval, self.poll_interval)
        conn: psycopg.AsyncConnection[Any] | None = None
        failures = 0
        try:
            while True:
                try:
                    await asyncio.wait_for(self._touch_now.wait(), interval)
                    # Woken by progress or attrs: gather a burst into one write.
                    await asyncio.sleep(0.05)
                except asyncio.TimeoutError:
                    pass
                self._touch_now.clear()
                try:
                    if conn is None or conn.closed:
                        conn = await self._connect("heartbeat")
                    await self._touch(conn)
                    failures = 0
                except psycopg.Error as exc:
                    failures += 1
                    log.warning("worker %s: heartbeat failed (%s)", self.id, exc)
                    await _close_quietly(conn)
                    conn = None
                    await asyncio.sleep(min(0.1 * 2 ** failures, interval))
        finally:
            # stop() cancels this loop: its session ends now, not at the next GC.
            await _close_quietly(conn)

    async def _touch(self, conn: psycopg.AsyncConnection[Any]) -> None:
        touched = [r for r in self.running.values() if not r.settled]
        reports = {r.claimed.id: r.report.take() for r in touched}
        payload = [{
            "id": r.claimed.id, "lease_token": r.claimed.lease_token,
            "lease_seconds": r.spec.lease_seconds,
            "progress": reports[r.claimed.id][0], "attrs": reports[r.claimed.id][1],
        } for r in touched]
        try:
            rows = await execute_async(conn, self.q("touch_jobs", jobs=json.dumps(payload)))
            await execute_async(conn, self._registration())
        except BaseException:
            for running in touched:
                running.report.put_back(*reports[running.claimed.id])
            raise
        alive = {str(row["id"]): row["cancel_requested"] for row in rows}
        for running in touched:
            job_id = running.claimed.id
            if job_id not in alive:
                if not running.settled:
                    # Fenced out: another worker may own this job now.
                    running.settled = True
                    running.state.set("lease_lost")
                    log.warning("job %s on %r: lease lost", job_id, running.claimed.queue)
            elif alive[job_id]:
                running.state.set("cancelled")
        progressed = [job_id for job_id, (progress, attrs) in reports.items()
                      if job_id in alive and (progress is not None or attrs)]
        if progressed:
            self._emit_later("job_progress", progressed)

    # --- listener ---

    async def _listen_loop(self) -> None:
        failures = 0
        while True:
            try:
                conn = await self._connect("listener")
            except psycopg.Error as exc:
                failures += 1
                delay = min(0.1 * 2 ** failures, RECONNECT_MAX_SECONDS)
                log.warning("worker %s: LISTEN connection failed (%s); retrying in %.1fs",
                            self.id, exc, delay)
                await asyncio.sleep(delay)
                continue
            try:
                await self._listen(conn)
                failures = 0
            except (psycopg.Error, asyncio.TimeoutError, OSError) as exc:
                failures += 1
                log.warning("worker %s: LISTEN connection lost (%s); reconnecting", self.id, exc)
                await asyncio.sleep(min(0.1 * 2 ** failures, RECONNECT_MAX_SECONDS))
            finally:
                await conn.close()

    async def _listen(self, conn: psycopg.AsyncConnection[Any]) -> None:
        for channel in (self.q.job_channel, self.q.cancel_channel):
            await conn.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(channel)))
        # Jobs added while no connection listened: look now.
        self.demand.want_all()
        while True:
            async for notify in conn.notifies(timeout=self.listen_check_seconds):
                if notify.channel == self.q.job_channel:
                    # Only the queue named, and only once it has a free slot.
                    self.demand.want(notify.payload)
                elif notify.channel == self.q.cancel_channel:
                    running = self.running.get(notify.payload)
                    if running is not None:
                        running.state.set("cancelled")
            # Quiet for a while: prove the connection still answers, so a
            # silently dropped one is replaced instead of waited on forever.
            try:
                await asyncio.wait_for(conn.execute("SELECT 1"), self.listen_check_seconds / 3)
            except asyncio.TimeoutError:
                raise asyncio.TimeoutError(
                    f"no answer to SELECT 1 within {self.listen_check_seconds / 3:.1f}s") from None
