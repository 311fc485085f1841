"""AsyncPortQueue: produce, manage and read jobs from asyncio code.

This module is the source of ``portqueue/client.py`` (``PortQueue``), which
tools/generate_sync_client.py writes from it; a test fails when they differ.
Both are thin: each method validates through, and runs, one operation of
``portqueue.operations``, on a pooled connection or on the caller's ``tx``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import aclosing
from types import TracebackType
from typing import Any, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool

from portqueue import flows, operations, pull, validation
from portqueue.availability import is_unavailable, unavailable
from portqueue.client_events import fire_async
from portqueue.driver import (
    AsyncCursorKeepingConnection,
    Operation,
    call_blocking_async,
    execute_async,
    pipeline_async,
    run_async,
)
from portqueue.errors import InvalidArgument, JobFailedError
from portqueue.ids import uuid7
from portqueue.metrics import hooks
from portqueue.migrate import migrate
from portqueue.queries import Batch, Query
from portqueue.settings import DEFAULT_RETENTION_SECONDS, client_settings
from portqueue.tasks import AsyncTaskFactory
from portqueue.tx import AsyncTx, from_psycopg
from portqueue.types import (
    AddJobResult,
    CancelCounts,
    CancelOutcome,
    CancelResult,
    Debounce,
    DrainResult,
    FetchedJob,
    FlowResult,
    FlowSnapshot,
    JobSnapshot,
    JobStatus,
    Page,
    PauseMode,
    QueueInfo,
    QueueStats,
    RateLimit,
    Retention,
    RetryPolicy,
    Schedule,
    ScheduleInfo,
    Throttle,
)
from portqueue.validation import DEFAULT_MAX_PAYLOAD_BYTES, DEFAULT_PAGE, batch_tx
from portqueue.worker.host import AsyncWorkerHost
from portqueue.worker.registry import DEFAULT_LEASE_SECONDS, Registry, queue_spec
from portqueue.worker.runtime import (
    DEFAULT_CONNECTIONS,
    LISTEN_HEALTH_SECONDS,
    MIN_CONNECTIONS,
    Worker,
)

# How often a poll_only client re-reads a waited-for job.
POLL_ONLY_WAIT_SECONDS = 0.1
# drain() stops its worker at once (nothing runs by then) or aborts it on its
# timeout: the grace only bounds a stop whose database is slow.
DRAIN_GRACE_SECONDS = 5.0

T = TypeVar("T")
H = TypeVar("H", bound=Callable[..., Any])


class AsyncPortQueue:
    """A portqueue client: owns a connection pool; safe to share between tasks of one loop.

    Args:
      dsn: the PostgreSQL connection string (URL or ``key=value``).
      schema: the Postgres schema holding portqueue's tables (default ``"portqueue"``).
      instance_key: this process's capability key, matched by jobs'
        ``preferred_instance_key_pattern`` (default ``None``).
      max_payload_bytes: the largest encoded ``data`` accepted (default 1 MiB).
      pool_min_size: the connection pool's lower bound (default 1).
      pool_max_size: the connection pool's upper bound (default 10).
      poll_only: for PgBouncer in transaction mode: no server-side prepared
        statements, no LISTEN (default ``False``).
      application_name: prefix of every connection's application_name (default
        ``"portqueue"``).
      default_retention_seconds: how long finished jobs are kept when neither the
        job nor its queue says (default 7 days).
      default_retention: per-outcome defaults under the job's and queue's
        (``Retention`` without ``ttl_seconds``): ``completed_ttl_seconds``,
        ``failed_ttl_seconds``, and count caps ``keep_completed`` /
        ``keep_failed`` for every queue that sets none (docs/retention.md).

    The pool opens on first use; ``aclose()`` (or ``async with``) releases it.
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "portqueue",
        instance_key: str | None = None,
        max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES,
        pool_min_size: int = 1,
        pool_max_size: int = 10,
        poll_only: bool = False,
        application_name: str = "portqueue",
        default_retention_seconds: int = DEFAULT_RETENTION_SECONDS,
        default_retention: Retention | Mapping[str, Any] | None = None,
    ) -> None:
        self._settings = client_settings(
            dsn,
            schema=schema,
            instance_key=instance_key,
            max_payload_bytes=max_payload_bytes,
            pool_min_size=pool_min_size,
            pool_max_size=pool_max_size,
            poll_only=poll_only,
            application_name=application_name,
            default_retention_seconds=default_retention_seconds,
            default_retention=default_retention,
        )
        self._pool = AsyncConnectionPool(
            dsn,
            min_size=self._settings.pool_min_size,
            # Widened to pool_max_size once a first connection has served (see
            # _run): a first request arriving while the pool still connects
            # would otherwise make it grow, and psycopg_pool hands its
            # connections out in turn, so a producer adding jobs one by one
            # would alternate between two backends, each statement going to
            # the one idle the longest, which is slower (docs/performance.md,
            # "Figures behind the code's comments").
            max_size=max(self._settings.pool_min_size, 1),
            # Autocommit: a one-statement operation (add_job, cancel_job, a read)
            # is one round trip instead of BEGIN, statement, COMMIT; operations
            # that need atomicity ask _run for a transaction.
            kwargs={**self._settings.connection_kwargs("client"), "autocommit": True},
            connection_class=AsyncCursorKeepingConnection,
            open=False,
            name=f"portqueue:{self._settings.schema}",
        )
        self._open_lock = asyncio.Lock()
        self._opened = False
        self._registry = Registry()
        self._host: AsyncWorkerHost | None = None
        # fetch_jobs: the verdicts on patterns judged for this client's key,
        # kept between calls as a worker keeps its own, and the id its claims
        # write as the jobs' worker_id (no worker row has it).
        self._verdicts = pull.ClientVerdicts(self._settings.instance_key)
        self._consumer_id = uuid7()

    def with_settings(
        self,
        *,
        dsn: str | None = None,
        schema: str | None = None,
        instance_key: str | None = None,
        max_payload_bytes: int | None = None,
        pool_min_size: int | None = None,
        pool_max_size: int | None = None,
        poll_only: bool | None = None,
        application_name: str | None = None,
        default_retention_seconds: int | None = None,
        default_retention: Retention | Mapping[str, Any] | None = None,
    ) -> AsyncPortQueue:
        """A new client with this one's settings and registrations (handlers,
        tasks, schedules declared), the settings given here replaced; an
        argument left ``None`` keeps this client's value. The new client has a
        pool of its own, opened on first use; this one is not touched.

        For code handed a client that must point it elsewhere or size it
        differently: ``portqueue worker --dsn/--schema/--instance-key``, or a
        small pool for a side reader::

            reader = pq.with_settings(pool_min_size=0, pool_max_size=1)

        Bad values raise ``InvalidArgument`` naming the argument, as the
        constructor does."""
        settings = self._settings
        chosen: dict[str, Any] = {
            "schema": schema, "instance_key": instance_key,
            "max_payload_bytes": max_payload_bytes, "pool_min_size": pool_min_size,
            "pool_max_size": pool_max_size, "poll_only": poll_only,
            "application_name": application_name,
            "default_retention_seconds": default_retention_seconds,
            "default_retention": default_retention,
        }
        options: dict[str, Any] = {
            "schema": settings.schema, "instance_key": settings.instance_key,
            "max_payload_bytes": settings.max_payload_bytes,
            "pool_min_size": settings.pool_min_size, "pool_max_size": settings.pool_max_size,
            "poll_only": settings.poll_only, "application_name": settings.application_name,
            "default_retention_seconds": settings.default_retention_seconds,
            "default_retention": settings.default_retention,
        }
        options.update({key: value for key, value in chosen.items() if value is not None})
        client = AsyncPortQueue(settings.dsn if dsn is None else dsn, **options)
        client._registry = self._registry
        return client

    @property
    def schema(self) -> str:
        return self._settings.schema

    @property
    def instance_key(self) -> str | None:
        return self._settings.instance_key

    @property
    def dsn(self) -> str:
        """The connection string this client connects with. It may hold a
        password: never log it or put it in an error message."""
        return self._settings.dsn

    # --- life cycle ---

    async def _open(self) -> None:
        if self._opened:
            return
        async with self._open_lock:
            if not self._opened:
                await self._pool.open()
                self._opened = True

    async def aclose(self) -> None:
        """Close the connection pool. Idempotent."""
        async with self._open_lock:
            if self._opened:
                await self._pool.close()
                self._opened = False

    async def __aenter__(self) -> AsyncPortQueue:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def migrate(self) -> None:
        """Create or upgrade the schema; safe to run from many processes at once."""
        settings = self._settings
        await call_blocking_async(lambda: migrate(settings.dsn, schema=settings.schema))

    async def _run(self, operation: Operation[T], tx: object = None, *, atomic: bool = False) -> T:
        # Taking the first query runs the operation's validation: bad input
        # raises here, before a connection is borrowed or anything is written
        # (a streamed batch validates each later chunk just before sending it,
        # inside its transaction, which a bad entry rolls back).
        # ``atomic``: the operation's statements share one transaction (a batch
        # whose later rounds must not leave earlier ones half-written, or an
        # operation using a savepoint); otherwise each statement commits alone.
        try:
            query: Query | Batch = next(operation)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        if tx is not None:
            if not isinstance(tx, AsyncTx):
                raise InvalidArgument(
                    "tx", f"AsyncPortQueue needs an async adapter from portqueue.tx, got {tx!r}")
            return await run_async(operation, query, tx.execute)
        await self._open()
        try:
            # getconn/putconn, not pool.connection(): its ``with conn`` commits
            # on the way out, a no-op in autocommit that still costs as much as
            # the checkout itself (docs/performance.md). putconn rolls back what
            # is left open.
            conn = await self._pool.getconn()
            try:
                if self._pool.max_size < self._settings.pool_max_size:
                    await self._pool.resize(
                        self._settings.pool_min_size, self._settings.pool_max_size)
                if atomic:
                    async with conn.transaction():
                        return await run_async(
                            operation, query, lambda q: execute_async(conn, q),
                            lambda batch: pipeline_async(conn, batch))
                return await run_async(
                    operation, query, lambda q: execute_async(conn, q),
                    lambda batch: pipeline_async(conn, batch))
            finally:
                await self._pool.putconn(conn)
        except psycopg.Error as error:
            # A database that is down, restarting or read-only is a typed,
            # retryable error; anything else (a bug, a constraint) is not.
            if is_unavailable(error):
                raise unavailable(error) from error
            raise

    # --- producing ---

    async def add_job(
        self,
        *,
        queue: str,
        data: Any,
        schedule: Schedule | Mapping[str, Any] | None = None,
        priority: int = 0,
        retry: RetryPolicy | Mapping[str, Any] | None = None,
        expire_in_seconds: int | None = None,
        retention: Retention | Mapping[str, Any] | None = None,
        timeout_seconds: int | None = None,
        preferred_instance_key_pattern: str | None = None,
        idempotency_key: str | None = None,
        singleton_key: str | None = None,
        group_id: str | None = None,
        partition_key: str | None = None,
        throttle: Throttle | Mapping[str, Any] | None = None,
        debounce: Debounce | Mapping[str, Any] | None = None,
        depends_on: Sequence[str] | None = None,
        tx: object = None,
    ) -> AddJobResult:
        """Add one job to ``queue`` (created on first use), or a recurring schedule.

        ``data`` is any JSON value (no NaN/Infinity, no NUL). ``retry``,
        ``expire_in_seconds`` and ``timeout_seconds`` default to what this
        client's handler of ``queue`` declares (``handler``/``create_queue``),
        else to the queue's stored defaults, then to one attempt, no expiry, no
        timeout; ``priority`` is 0
        (higher runs first); retention follows the job, else the queue, else
        the client. A recurring ``schedule`` (``start_every_seconds`` or
        ``cron``) stores a schedule and returns its ``schedule_id`` and
        ``next_run_at``; the other options become the
        template of every job it spawns. A matching ``idempotency_key`` (ever)
        or ``singleton_key`` (pending/active job) returns the existing job with
        ``deduplicated=True`` instead of adding; inside ``tx`` that never aborts
        the caller's transaction. A ``preferred_instance_key_pattern`` must
        compile and match in PostgreSQL within 100 ms (checked in a savepoint
        first; a refusal leaves ``tx`` usable). Raises ``QueuePausedError`` when
        the queue is paused with ``PauseMode.ALL``.

        Flow control (docs/flow-control.md): ``partition_key`` (at most 256
        characters) is what the queue's ``partition_concurrency`` and per-partition
        ``rate_limit`` count by. ``throttle`` (``Throttle``) creates at most one job
        per key and window, returning it (``deduplication_reason="THROTTLE"``) to
        the window's later adds; ``debounce`` (``Debounce``) keeps one pending job
        per key, each add replacing its data and moving its start (``"DEBOUNCE"``).
        Neither combines with ``idempotency_key``, ``singleton_key`` or ``schedule``.

        ``depends_on`` (job ids of this schema): the job is added ``waiting``
        and becomes ``pending`` when every one of them has completed (at once
        if they all have); see docs/workflows.md.
        """
        options = {
            "queue": queue, "data": data, "schedule": schedule, "priority": priority,
            "retry": retry, "expire_in_seconds": expire_in_seconds, "retention": retention,
            "timeout_seconds": timeout_seconds,
            "preferred_instance_key_pattern": preferred_instance_key_pattern,
            "idempotency_key": idempotency_key, "singleton_key": singleton_key,
            "group_id": group_id,
            "partition_key": partition_key, "throttle": throttle, "debounce": debounce,
        }
        with hooks.adding(queue, self._settings.dsn) as scope:  # the add span and counter
            if depends_on is not None:
                operation: Operation[AddJobResult] = flows.add_dependent_job(
                    self._settings, options, depends_on, self._registry.add_defaults,
                    scope.attrs)
            else:
                operation = operations.add_job(self._settings, options, scope.attrs,
                                               self._registry.add_defaults)
            result = await self._run(
                operation, tx,
                # A recurring add reads the clock, then stores the schedule:
                # one transaction, so its first tick is exactly one period
                # after its created_at. A pattern is checked in a savepoint
                # first (operations.check_patterns). A plain add is one
                # statement; a dependent one locks its dependencies first.
                atomic=(depends_on is not None or schedule is not None
                        or preferred_instance_key_pattern is not None))
            scope.added([result])
        return result

    async def add_jobs(
        self, *, queue: str, jobs: Sequence[Mapping[str, Any]], tx: object = None
    ) -> list[AddJobResult]:
        """Add one-off jobs in one statement; one result per entry, in order.

        Each entry takes ``add_job``'s options (``data`` required). Recurring
        entries are rejected, and so are entries naming different ``tx``.
        """
        chosen_tx = batch_tx(tx, jobs)
        with hooks.adding(queue, self._settings.dsn, batch=True) as scope:
            if flows.has_dependencies(jobs):  # entries with depends_on (docs/workflows.md)
                operation = flows.add_dependent_jobs(
                    self._settings, queue, jobs, self._registry.add_defaults, scope.attrs)
            else:
                operation = operations.add_job_batch(
                    self._settings, queue, jobs, scope.attrs, streamed=chosen_tx is None,
                    declared=self._registry.add_defaults)
            results = await self._run(operation, chosen_tx, atomic=True)
            scope.added(results)
        return results

    # --- workflows (SPEC §9, docs/workflows.md) ---

    async def add_flow(
        self, *, jobs: Sequence[Mapping[str, Any]], tx: object = None
    ) -> FlowResult:
        """Add a graph of jobs atomically: each entry has a ``key``, a ``queue``,
        ``data``, optional ``depends_on`` (keys of this flow),
        ``on_dependency_failure`` (``"cancel"``, the default, or ``"run"``) and
        add_job's options. Unknown keys and cycles raise ``ValueError``, with
        nothing written."""
        with hooks.adding(flows.flow_destination(jobs), self._settings.dsn,
                          batch=True) as scope:
            result = await self._run(flows.add_flow(
                self._settings, jobs, self._registry.add_defaults, scope.attrs), tx,
                atomic=True)
            scope.added(list(result.jobs.values()))
        return result

    async def get_flow(self, *, flow_id: str, tx: object = None) -> FlowSnapshot | None:
        """The flow's status and its jobs by key, or ``None`` if no job has ``flow_id``."""
        return await self._run(flows.get_flow(self._settings, flow_id), tx)

    async def subscribe(self, *, topic: str, queue: str, tx: object = None) -> bool:
        """Make ``publish(topic=...)`` add a job to ``queue``; ``False`` if it did already."""
        return await self._run(flows.subscribe(self._settings, topic, queue), tx)

    async def unsubscribe(self, *, topic: str, queue: str, tx: object = None) -> bool:
        """Undo ``subscribe``; ``False`` if there was no such subscription."""
        return await self._run(flows.unsubscribe(self._settings, topic, queue), tx)

    async def publish(
        self,
        *,
        topic: str,
        data: Any,
        priority: int = 0,
        retry: RetryPolicy | Mapping[str, Any] | None = None,
        expire_in_seconds: int | None = None,
        retention: Retention | Mapping[str, Any] | None = None,
        timeout_seconds: int | None = None,
        preferred_instance_key_pattern: str | None = None,
        group_id: str | None = None,
        schedule: Schedule | Mapping[str, Any] | None = None,
        tx: object = None,
    ) -> list[AddJobResult]:
        """Add one job to every queue subscribed to ``topic``, in one statement;
        their results by queue name (an empty list when nobody subscribes). The
        options apply to each job."""
        options = {
            "data": data, "schedule": schedule, "priority": priority, "retry": retry,
            "expire_in_seconds": expire_in_seconds, "retention": retention,
            "timeout_seconds": timeout_seconds,
            "preferred_instance_key_pattern": preferred_instance_key_pattern,
            "group_id": group_id,
        }
        with hooks.adding(topic, self._settings.dsn, batch=True) as scope:
            results = await self._run(
                flows.publish(self._settings, topic, options, scope.attrs), tx,
                atomic=preferred_instance_key_pattern is not None)
            scope.added(results)
        return results

    # --- managing ---

    async def retry_job(self, *, job_id: str, tx: object = None) -> AddJobResult | None:
        """Re-arm a settled job's own row to ``pending``; ``None`` if unknown or active."""
        return await self._run(operations.retry(self._settings, job_id), tx, atomic=True)

    async def cancel_job(self, *, job_id: str, tx: object = None) -> CancelResult:
        """Cancel a pending job, or signal a running one's handler to stop.

        A pending job cancelled here (without ``tx``) fires this client's
        ``job_cancelled`` callbacks once the cancel committed."""
        result = await self._run(operations.cancel(self._settings, job_id), tx)
        if tx is None and result.outcome is CancelOutcome.CANCELLED:
            await self._fire_cancelled([result.job_id])
        return result

    async def _fire_cancelled(self, job_ids: list[str]) -> None:
        # With tx= the cancel commits with the caller's transaction, which this
        # client never sees: no event then (docs/consuming.md, Events).
        callbacks = self._registry.callbacks("job_cancelled")
        if callbacks and job_ids:
            snapshots = await self._run(operations.read_jobs_by_id(self._settings, job_ids))
            for snapshot in snapshots:
                await fire_async("job_cancelled", callbacks, snapshot)

    async def remove_job(self, *, job_id: str, tx: object = None) -> bool:
        """Delete one job row; never an active one (returns ``False``)."""
        return await self._run(operations.remove(self._settings, job_id), tx)

    async def remove_jobs(
        self,
        *,
        job_ids: Sequence[str] | None = None,
        queue: str | None = None,
        statuses: Sequence[JobStatus] | None = None,
        tx: object = None,
    ) -> int:
        """Delete jobs by id (any queue), or by status on one queue; skips active jobs."""
        operation = operations.remove_many(self._settings, job_ids, queue, statuses)
        return await self._run(operation, tx)

    async def remove_schedule(self, *, schedule_id: str, tx: object = None) -> bool:
        """Delete a schedule so it spawns no more jobs; jobs it spawned are untouched."""
        return await self._run(operations.unschedule(self._settings, schedule_id), tx)

    async def remove_queue(self, *, queue: str, tx: object = None) -> bool:
        """Delete ``queue``: its row, its schedules and its finished jobs.

        Only a queue with no unfinished job: with pending or active jobs it
        removes nothing and raises ``QueueNotEmpty``. Returns ``False`` for a
        queue that does not exist. A handler still registered for it in some
        worker writes its row again when that worker starts."""
        return await self._run(operations.drop_queue(self._settings, queue), tx)

    async def pause_queue(
        self, *, queue: str, mode: PauseMode = PauseMode.PROCESSING, tx: object = None
    ) -> QueueInfo:
        """Pause ``queue`` cluster-wide: stop claiming, and with ``ALL`` refuse adds."""
        return await self._run(operations.pause(self._settings, queue, mode), tx)

    async def resume_queue(self, *, queue: str, tx: object = None) -> QueueInfo:
        """Undo ``pause_queue``."""
        return await self._run(operations.resume(self._settings, queue), tx)

    # --- managing in bulk, dead letters ---

    async def retry_jobs(
        self,
        *,
        job_ids: Sequence[str] | None = None,
        queue: str | None = None,
        statuses: Sequence[JobStatus] | None = None,
        tx: object = None,
    ) -> int:
        """Re-arm settled jobs as ``retry_job`` does, in one statement: by id (any
        queue), or ``queue``'s jobs in ``statuses`` (completed, failed, cancelled,
        expired). Active and pending jobs are never re-armed; of jobs sharing a
        singleton key, only the newest, and none while another live job holds it.
        Returns how many were re-armed."""
        operation = operations.retry_many(self._settings, job_ids, queue, statuses)
        return await self._run(operation, tx, atomic=True)

    async def cancel_jobs(
        self,
        *,
        job_ids: Sequence[str] | None = None,
        queue: str | None = None,
        statuses: Sequence[JobStatus] | None = None,
        tx: object = None,
    ) -> CancelCounts:
        """Cancel pending jobs and signal running ones, as ``cancel_job`` does, in
        one statement: by id (any queue), or ``queue``'s jobs in ``statuses``
        (pending, active). Returns a ``CancelCounts``: an int, the jobs cancelled
        or signalled, with ``.cancelled``, ``.signalled``, ``.already_finished``
        and ``.not_found``. Without ``tx``, this client's ``job_cancelled``
        callbacks fire for the jobs cancelled."""
        operation = operations.cancel_many(self._settings, job_ids, queue, statuses)
        counts, cancelled = await self._run(operation, tx)
        if tx is None:
            await self._fire_cancelled(cancelled)
        return counts

    async def redrive(self, *, queue: str, limit: int | None = None, tx: object = None) -> int:
        """Send the dead-letter copies waiting in ``queue`` (pending ones, oldest
        first, at most ``limit``) back: each copy's data is added to the queue of
        the job it copies as a new job, and the copy is completed, its output
        ``{"redriven_job_id": …}``. One transaction (``tx``, else the client's);
        returns how many were redriven. A copy whose source job was removed is
        left in place."""
        operation = operations.redrive(self._settings, queue, limit, self._registry.add_defaults)
        return await self._run(operation, tx, atomic=True)

    async def set_queue_limits(
        self,
        *,
        queue: str,
        global_concurrency: int | None = operations.UNSET,
        partition_concurrency: int | None = operations.UNSET,
        rate_limit: RateLimit | Mapping[str, Any] | None = operations.UNSET,
        tx: object = None,
    ) -> QueueInfo:
        """Change ``queue``'s flow-control limits at run time (its row is created if
        need be); every worker picks the change up within about a second.

        Only the limits named change: ``None`` removes one, a limit not passed
        keeps its stored value. Returns the queue as stored."""
        operation = operations.set_limits(self._settings, queue, global_concurrency,
                                          partition_concurrency, rate_limit)
        return await self._run(operation, tx)

    # --- reading ---

    async def get_job(self, *, job_id: str, tx: object = None) -> JobSnapshot | None:
        """The job's row as a snapshot, or ``None``."""
        return await self._run(operations.read_job(self._settings, job_id), tx)

    async def get_jobs(
        self,
        *,
        queue: str,
        statuses: Sequence[JobStatus] | None = None,
        group_id: str | None = None,
        limit: int = DEFAULT_PAGE,
        offset: int = 0,
        tx: object = None,
    ) -> Page[JobSnapshot]:
        """A page of ``queue``'s jobs, newest first; ``total`` counts every match."""
        operation = operations.read_jobs(self._settings, queue, statuses, group_id, limit, offset)
        return await self._run(operation, tx)

    async def get_queue_stats(self, *, queue: str, tx: object = None) -> QueueStats:
        """Counts per status (zeros included), pause mode, oldest ready job's wait."""
        return await self._run(operations.read_queue_stats(self._settings, queue), tx)

    async def get_queue(self, *, queue: str, tx: object = None) -> QueueInfo | None:
        """The queue's pause mode and stored defaults, or ``None`` if it does not exist."""
        return await self._run(operations.read_queue(self._settings, queue), tx)

    async def get_queues(
        self, *, limit: int = DEFAULT_PAGE, offset: int = 0, tx: object = None
    ) -> Page[QueueInfo]:
        """A page of every queue, newest first, with its pause mode and defaults."""
        return await self._run(operations.read_queues(self._settings, limit, offset), tx)

    async def get_schedules(
        self,
        *,
        queue: str | None = None,
        enabled: bool | None = None,
        limit: int = DEFAULT_PAGE,
        offset: int = 0,
        tx: object = None,
    ) -> Page[ScheduleInfo]:
        """A page of schedules (of ``queue``, when given), newest first."""
        operation = operations.read_schedules(self._settings, queue, enabled, limit, offset)
        return await self._run(operation, tx)

    # --- consuming: pull consumers ---

    async def fetch_jobs(
        self, *, queue: str, limit: int = 10, lease_seconds: int = DEFAULT_LEASE_SECONDS
    ) -> list[FetchedJob]:
        """Claim up to ``limit`` ready jobs of ``queue`` for code of your own, as a
        worker claims them (attempt counted, pause honoured, instance key
        patterns judged for this client's ``instance_key``), each leased for
        ``lease_seconds`` (default 60). Settle each with ``complete_job`` or
        ``fail_job`` before its lease lapses (``extend_lease`` renews it); a
        lapsed lease is rescued by maintenance like a worker's."""
        operation = pull.fetch(self._settings, self._verdicts, self._consumer_id, queue, limit,
                               lease_seconds)
        return await self._run(operation, atomic=True)

    async def complete_job(
        self, *, job_id: str, lease_token: int, output: Any = None, tx: object = None
    ) -> bool:
        """Complete a fetched job with ``output``; ``False`` if its lease is no
        longer held (lapsed and rescued, or fetched again), and nothing is
        written. With ``tx`` the completion commits with the caller's writes."""
        operation = pull.complete(self._settings, job_id, lease_token, output)
        return await self._run(operation, tx)

    async def fail_job(
        self, *, job_id: str, lease_token: int, error: str | BaseException, retry: bool = True
    ) -> bool:
        """Fail a fetched job's attempt, recording ``error`` (text, or an exception
        with its traceback). With ``retry`` and attempts left it goes back to
        pending after its retry policy's delay, as a raising handler's does;
        otherwise it ends failed and is dead-lettered if its queue says so. A job
        whose cancel was requested ends cancelled. ``error`` may be a ``Snooze``
        (back to pending ``seconds`` later, no attempt spent) or a ``Cancel``
        (cancelled at once, no retry), as a handler raises them. ``False`` if the
        lease is no longer held."""
        operation = pull.fail(self._settings, job_id, lease_token, error, retry)
        return await self._run(operation)

    async def extend_lease(self, *, job_id: str, lease_token: int, lease_seconds: int) -> bool:
        """Renew a fetched job's lease to ``lease_seconds`` from now (the database
        clock); ``False`` if it is no longer held."""
        operation = pull.extend(self._settings, job_id, lease_token, lease_seconds)
        return await self._run(operation)

    # --- consuming: registration (plain calls, no I/O) ---

    def handler(
        self,
        queue: str,
        *,
        concurrency: int = 1,
        retry: RetryPolicy | Mapping[str, Any] | None = None,
        retention: Retention | Mapping[str, Any] | None = None,
        expire_in_seconds: int | None = None,
        timeout_seconds: int | None = None,
        lease_seconds: int = DEFAULT_LEASE_SECONDS,
        dead_letter_queue: str | None = None,
        dont_autoretry_for: Sequence[type[BaseException]] = (),
        global_concurrency: int | None = None,
        partition_concurrency: int | None = None,
        rate_limit: RateLimit | Mapping[str, Any] | None = None,
    ) -> Callable[[H], H]:
        """Decorator: make the function the handler of ``queue``; see ``create_queue``."""

        def register(function: H) -> H:
            self.create_queue(
                queue=queue, handler=function, concurrency=concurrency, retry=retry,
                retention=retention, expire_in_seconds=expire_in_seconds,
                timeout_seconds=timeout_seconds, lease_seconds=lease_seconds,
                dead_letter_queue=dead_letter_queue, dont_autoretry_for=dont_autoretry_for,
                global_concurrency=global_concurrency,
                partition_concurrency=partition_concurrency, rate_limit=rate_limit,
            )
            return function

        return register

    def create_queue(
        self,
        *,
        queue: str,
        handler: Callable[..., Any],
        concurrency: int = 1,
        retry: RetryPolicy | Mapping[str, Any] | None = None,
        retention: Retention | Mapping[str, Any] | None = None,
        expire_in_seconds: int | None = None,
        timeout_seconds: int | None = None,
        lease_seconds: int = DEFAULT_LEASE_SECONDS,
        dead_letter_queue: str | None = None,
        dont_autoretry_for: Sequence[type[BaseException]] = (),
        global_concurrency: int | None = None,
        partition_concurrency: int | None = None,
        rate_limit: RateLimit | Mapping[str, Any] | None = None,
    ) -> None:
        """Process ``queue`` in this client's workers with ``handler`` (sync or async).

        ``concurrency`` (default 1) bounds the jobs running at once in this process.
        ``retry``, ``retention``, ``expire_in_seconds`` and ``timeout_seconds`` become
        the queue's defaults: this client's own adds use them from the first job,
        worker started or not; they are stored in the ``queue`` table when a
        worker starts, and producers without the handler use them from then on
        (docs/consuming.md). ``lease_seconds`` (default 60): how long a
        running job survives without a heartbeat before it is rescued.
        ``dead_letter_queue`` receives a copy of each job that ends failed.
        Exceptions in ``dont_autoretry_for`` fail the job without retrying.

        Flow control across every worker (docs/flow-control.md):
        ``global_concurrency`` bounds the queue's active jobs, ``partition_concurrency``
        those of each ``partition_key``, ``rate_limit`` (``RateLimit``) its starts per
        window. A worker's start writes the limits declared here and leaves the
        others as stored (``set_queue_limits``).
        """
        self._registry.add_queue(queue_spec(
            queue=queue, handler=handler, concurrency=concurrency, retry=retry,
            retention=retention, expire_in_seconds=expire_in_seconds,
            timeout_seconds=timeout_seconds, lease_seconds=lease_seconds,
            dead_letter_queue=dead_letter_queue, dont_autoretry_for=dont_autoretry_for,
            global_concurrency=global_concurrency, partition_concurrency=partition_concurrency,
            rate_limit=rate_limit,
        ))

    def task(self, queue: str | None = None, **queue_options: Any) -> AsyncTaskFactory:
        """Decorator: a task object for the function, registered as the handler of
        ``queue`` (default ``"<module>.<qualname>"``) with ``create_queue``'s
        options. ``await task.add(**arguments)`` adds a job whose data is the
        arguments, checked against the signature; ``task.configure(**add_options)``
        sets add options; ``task(...)`` runs the function here and now. See
        ``portqueue.tasks`` for the argument encoding and the ``job`` parameter."""
        return AsyncTaskFactory(self, queue, queue_options)

    def on(self, event: str, callback: Callable[..., Any]) -> None:
        """Call ``callback(snapshot)`` on ``job_started``, ``job_completed``,
        ``job_cancelled``, ``job_progress``, ``job_rescued`` (this worker's
        maintenance took back a lapsed lease), and ``callback(snapshot, error)`` on
        ``job_failed`` (once, when the job ends failed) and ``job_retrying``."""
        self._registry.on(event, callback)

    # --- consuming: running workers ---

    def _worker(
        self, queues: Sequence[str] | None, concurrency: int | None, maintenance: bool,
        scheduler: bool, poll_interval: float, grace_seconds: float,
        listen_check_seconds: float = LISTEN_HEALTH_SECONDS,
        connections: int = DEFAULT_CONNECTIONS,
    ) -> Worker:
        if self._host is not None:
            raise InvalidArgument("start", "this client's worker is already running")
        registered = self._registry.queues()
        chosen = registered if queues is None else {
            name: registered[name] for name in validation.known_queues(queues, registered)}
        if not chosen and (queues is None or not (scheduler or maintenance)):
            # queues=[] asks for a process that only runs the scheduler and
            # maintenance; with neither, or with nothing registered, it is a mistake.
            raise InvalidArgument("queues", "no queue has a handler in this client"
                                  if queues is None else "nothing to run: no queue, no "
                                  "scheduler and no maintenance")
        if concurrency is not None:
            limit = validation.integer("concurrency", concurrency, minimum=1, maximum=10_000)
            chosen = {name: spec.with_concurrency(limit) for name, spec in chosen.items()}
        return Worker(
            self._settings, self._registry, queues=chosen,
            poll_interval=validation.positive_seconds("poll_interval", poll_interval),
            grace_seconds=validation.positive_seconds("grace_seconds", grace_seconds),
            maintenance=maintenance,
            scheduler=scheduler,
            listen_check_seconds=validation.positive_seconds(
                "listen_check_seconds", listen_check_seconds),
            connections=validation.integer("connections", connections,
                                           minimum=MIN_CONNECTIONS, maximum=1000),
        )

    async def start(
        self,
        *,
        queues: Sequence[str] | None = None,
        concurrency: int | None = None,
        scheduler: bool = True,
        maintenance: bool = True,
        poll_interval: float = 1.0,
        grace_seconds: float = 30.0,
        listen_check_seconds: float = LISTEN_HEALTH_SECONDS,
        connections: int = DEFAULT_CONNECTIONS,
    ) -> None:
        """Start consuming the registered queues (or ``queues``); returns once running.

        ``queues=[]`` consumes nothing: the process runs only the scheduler and
        maintenance (for an application that adds jobs its workers run elsewhere).

        ``concurrency`` overrides every queue's. ``poll_interval`` (default 1 s) is
        the fallback when no NOTIFY arrives; ``grace_seconds`` (default 30) bounds
        how long ``stop()`` waits for running handlers. ``maintenance`` runs the
        maintenance services in this process; ``scheduler`` spawns jobs from schedules.
        ``listen_check_seconds`` (default 15): a LISTEN connection quiet this long
        must answer a ``SELECT 1`` within a third of it or is replaced, so a
        silently dropped one is noticed in about 4/3 of it plus 5 s.
        ``connections`` (default 3, at least 3): the worker's own connections,
        the listener, the claim session (claims and heartbeats) and a pool
        for outcomes, maintenance and the scheduler, which gets the rest
        (docs/operations.md, "Connections per worker"). While the server has
        no connection free, the worker waits for them (one warning) and
        returns once it has them.
        """
        worker = self._worker(
            queues, concurrency, maintenance, scheduler, poll_interval, grace_seconds,
            listen_check_seconds, connections)
        host = AsyncWorkerHost(worker)
        await host.start()
        self._host = host

    async def stop(self, *, abort: bool = False) -> None:
        """Stop claiming and wait for running handlers (up to ``grace_seconds``); with
        ``abort``, set every handler's signal and release unfinished jobs to pending
        at once, without spending their attempt."""
        host, self._host = self._host, None
        if host is not None:
            await host.stop(abort=abort)

    async def run(
        self,
        *,
        queues: Sequence[str] | None = None,
        concurrency: int | None = None,
        scheduler: bool = True,
        maintenance: bool = True,
        poll_interval: float = 1.0,
        grace_seconds: float = 30.0,
        listen_check_seconds: float = LISTEN_HEALTH_SECONDS,
        connections: int = DEFAULT_CONNECTIONS,
    ) -> None:
        """Run workers until SIGTERM (drain, then return) or SIGINT / a second signal
        (abort). Raises ``PortQueueError`` if the worker dies of a fatal error.
        Settings as for ``start()``."""
        worker = self._worker(
            queues, concurrency, maintenance, scheduler, poll_interval, grace_seconds,
            listen_check_seconds, connections)
        host = AsyncWorkerHost(worker)
        self._host = host
        try:
            await host.run()
        finally:
            self._host = None

    async def drain(
        self,
        queues: Sequence[str] | None = None,
        *,
        with_scheduled: bool = False,
        timeout_seconds: float = 30.0,
    ) -> DrainResult:
        """Run, here and now, every ready job of ``queues`` (default: every queue with
        a handler in this client), including jobs they add, until none is ready;
        for tests. ``with_scheduled`` also runs delayed jobs and pending retries at
        once (their ``start_after`` is moved to now). Leases, fencing, retries and
        ``job.transaction()`` behave as in a worker: it is one, without its claim
        loop. Returns the counts of each outcome; the builtin ``TimeoutError`` if
        the queues are not dry within ``timeout_seconds`` (default 30)."""
        if not isinstance(with_scheduled, bool):
            raise InvalidArgument("with_scheduled", "must be True or False")
        timeout = validation.positive_seconds("timeout_seconds", timeout_seconds)
        registered = self._registry.queues()
        chosen = registered if queues is None else {
            name: registered[name] for name in validation.known_queues(queues, registered)}
        if not chosen:
            raise InvalidArgument("queues", "no queue has a handler in this client"
                                  if queues is None else "no queue given")
        worker = Worker(self._settings, self._registry, queues=chosen, poll_interval=1.0,
                        grace_seconds=DRAIN_GRACE_SECONDS, maintenance=False, scheduler=False,
                        for_drain=True)
        return await AsyncWorkerHost(worker).drain(
            with_scheduled=with_scheduled, timeout_seconds=timeout)

    # --- waiting for a result ---

    async def wait_for_job(self, *, job_id: str, timeout_seconds: float) -> JobSnapshot:
        """The job's snapshot once it has finished (any final status).

        Listens for the job's finish notification rather than polling; raises the
        builtin ``TimeoutError`` when ``timeout_seconds`` pass first. A job
        retried after that finish (``retry_job``) is waited for again, until it
        finishes anew. ``JobDeletedError`` if the job was deleted before the read
        that follows its finish (``remove_job``; retention keeps a waited-for job
        a minute past its finish, docs/retention.md)."""
        checked = validation.job_id(job_id)
        deadline = time.monotonic() + validation.positive_seconds(
            "timeout_seconds", timeout_seconds)
        async with await self._waiter_connection() as conn:
            finished = await self._watch(conn, checked)
            return await self._wait_finished(conn, checked, finished, deadline)

    async def add_job_and_wait(
        self, *, queue: str, data: Any, timeout_seconds: float, **options: Any
    ) -> Any:
        """Add a one-off job (``add_job``'s options) and return its handler's result.

        Raises ``JobFailedError`` (with ``.job``) if it ends failed, cancelled or
        expired, and ``TimeoutError`` if it has not finished in time;
        ``JobDeletedError`` and retried jobs as for ``wait_for_job``."""
        deadline = time.monotonic() + validation.positive_seconds(
            "timeout_seconds", timeout_seconds)
        if validation.is_recurring(options.get("schedule")):
            raise InvalidArgument("schedule", "add_job_and_wait takes one-off jobs only")
        if options.get("tx") is not None:
            # No worker can run a job before its transaction commits: the
            # wait would always time out.
            raise InvalidArgument("tx", "add_job_and_wait cannot join a caller's transaction")
        async with await self._waiter_connection() as conn:
            # Subscribed before the insert, and the add and the watch commit
            # together: the job is never there unwatched, so neither a fast
            # finish nor the pruner (retention 0) can get to it first.
            async with conn.transaction():
                added = await self.add_job(
                    queue=queue, data=data, tx=from_psycopg(conn), **options)
                job_id = operations.added_job_id(added)
                finished = await self._watch(conn, job_id)
            snapshot = await self._wait_finished(conn, job_id, finished, deadline)
        if snapshot.status is JobStatus.COMPLETED:
            return snapshot.output
        raise JobFailedError(snapshot)

    async def _waiter_connection(self) -> psycopg.AsyncConnection[Any]:
        conn = await psycopg.AsyncConnection.connect(
            self._settings.dsn, autocommit=True, **self._settings.connection_kwargs("waiter"))
        if not self._settings.poll_only:
            channel = psycopg.sql.Identifier(self._settings.queries.finished_channel)
            await conn.execute(psycopg.sql.SQL("LISTEN {}").format(channel))
        return conn

    async def _watch(self, conn: psycopg.AsyncConnection[Any], job_id: str) -> bool:
        # Asks for the job's finish notification; True if it has finished already.
        q = self._settings.queries
        watched = await execute_async(conn, q("watch_job", job_id=job_id))
        if not watched:
            raise InvalidArgument("job_id", f"no job {job_id}")
        return bool(watched[0]["finished"])

    async def _wait_finished(
        self, conn: psycopg.AsyncConnection[Any], job_id: str, finished: bool, deadline: float
    ) -> JobSnapshot:
        if finished:
            snapshot = await self._finished_job(conn, job_id)
            if snapshot is not None:
                return snapshot
        while True:
            await self._finish_signalled(conn, job_id, deadline)
            snapshot = await self._finished_job(conn, job_id)
            if snapshot is not None:
                return snapshot

    async def _finish_signalled(
        self, conn: psycopg.AsyncConnection[Any], job_id: str, deadline: float
    ) -> None:
        # Returns when the job may have finished: its notification came, or,
        # poll_only (PgBouncer in transaction mode, no LISTEN), a poll interval
        # passed. TimeoutError once the deadline has passed.
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"job {job_id} did not finish in time")
        if self._settings.poll_only:
            await asyncio.sleep(min(POLL_ONLY_WAIT_SECONDS, remaining))
            return
        # Closed before the read that follows: a suspended notifies() holds
        # the connection's lock.
        async with aclosing(conn.notifies(timeout=remaining)) as notifies:
            async for notify in notifies:
                if notify.payload == job_id:
                    return
        raise TimeoutError(f"job {job_id} did not finish in time")

    async def _finished_job(
        self, conn: psycopg.AsyncConnection[Any], job_id: str
    ) -> JobSnapshot | None:
        operation = operations.finished_job(self._settings.queries, job_id)
        return await run_async(
            operation, next(operation), lambda query: execute_async(conn, query))
