"""AsyncPortQueue: produce, manage and read jobs from asyncio code.

This module is the source of ``portqueue/client.py`` (``PortQueue``), which
tools/generate_sync_client.py writes from it; a test fails when they differ.
Both are thin: each method validates through, and runs, one operation of
``portqueue.operations``, on a pooled connection or on the caller's ``tx``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

from psycopg_pool import AsyncConnectionPool

from portqueue import operations
from portqueue.driver import Operation, call_blocking_async, execute_async, run_async
from portqueue.errors import InvalidArgument
from portqueue.migrate import migrate
from portqueue.queries import Query
from portqueue.settings import DEFAULT_RETENTION_SECONDS, client_settings
from portqueue.tx import AsyncTx
from portqueue.types import (
    AddJobResult,
    CancelResult,
    JobSnapshot,
    JobStatus,
    Page,
    PauseMode,
    QueueInfo,
    QueueStats,
    Retention,
    RetryPolicy,
    Schedule,
    ScheduleInfo,
)
from portqueue.validation import DEFAULT_MAX_PAYLOAD_BYTES, DEFAULT_PAGE, batch_tx

T = TypeVar("T")


class AsyncPortQueue:
    """A portqueue client: owns a connection pool; safe to share between tasks of one loop.

    Settings (keyword-only):
      schema: the Postgres schema holding portqueue's tables (default ``"portqueue"``).
      instance_key: this process's capability key, matched by jobs'
        ``preferred_instance_key_pattern`` (default ``None``).
      max_payload_bytes: the largest encoded ``data`` accepted (default 1 MiB).
      pool_min_size / pool_max_size: connection pool bounds (default 1 / 10).
      poll_only: for PgBouncer in transaction mode: no server-side prepared
        statements, no LISTEN (default ``False``).
      application_name: prefix of every connection's application_name (default
        ``"portqueue"``).
      default_retention_seconds: how long finished jobs are kept when neither the
        job nor its queue says (default 7 days).

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
        )
        self._pool = AsyncConnectionPool(
            dsn,
            min_size=self._settings.pool_min_size,
            max_size=self._settings.pool_max_size,
            kwargs=self._settings.connection_kwargs("client"),
            open=False,
            name=f"portqueue:{self._settings.schema}",
        )
        self._open_lock = asyncio.Lock()
        self._opened = False

    @property
    def schema(self) -> str:
        return self._settings.schema

    @property
    def instance_key(self) -> str | None:
        return self._settings.instance_key

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

    async def _run(self, operation: Operation[T], tx: object = None) -> T:
        # Taking the first query runs the operation's validation: bad input
        # raises here, before a connection is borrowed or anything is written.
        try:
            query: Query = next(operation)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        if tx is not None:
            if not isinstance(tx, AsyncTx):
                raise InvalidArgument(
                    "tx", f"AsyncPortQueue needs an async adapter from portqueue.tx, got {tx!r}")
            return await run_async(operation, query, tx.execute)
        await self._open()
        async with self._pool.connection() as conn:
            return await run_async(operation, query, lambda q: execute_async(conn, q))

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
        tx: object = None,
    ) -> AddJobResult:
        """Add one job to ``queue`` (created on first use), or a recurring schedule.

        ``data`` is any JSON value (no NaN/Infinity, no NUL). ``retry``,
        ``expire_in_seconds`` and ``timeout_seconds`` default to the queue's
        defaults, then to one attempt, no expiry, no timeout; ``priority`` is 0
        (higher runs first); retention follows the job, else the queue, else
        the client. A recurring ``schedule`` (``start_every_seconds`` or
        ``cron``) stores a schedule and returns its ``schedule_id`` and
        ``next_run_at``; the other options become the
        template of every job it spawns. A matching ``idempotency_key`` (ever)
        or ``singleton_key`` (pending/active job) returns the existing job with
        ``deduplicated=True`` instead of adding; inside ``tx`` that never aborts
        the caller's transaction. Raises ``QueuePausedError`` when the queue is
        paused with ``PauseMode.ALL``.
        """
        options = {
            "queue": queue, "data": data, "schedule": schedule, "priority": priority,
            "retry": retry, "expire_in_seconds": expire_in_seconds, "retention": retention,
            "timeout_seconds": timeout_seconds,
            "preferred_instance_key_pattern": preferred_instance_key_pattern,
            "idempotency_key": idempotency_key, "singleton_key": singleton_key,
            "group_id": group_id,
        }
        return await self._run(operations.add_job(self._settings, options), tx)

    async def add_jobs(
        self, *, queue: str, jobs: Sequence[Mapping[str, Any]], tx: object = None
    ) -> list[AddJobResult]:
        """Add one-off jobs in one statement; one result per entry, in order.

        Each entry takes ``add_job``'s options (``data`` required). Recurring
        entries are rejected, and so are entries naming different ``tx``.
        """
        chosen_tx = batch_tx(tx, jobs)
        return await self._run(operations.add_job_batch(self._settings, queue, jobs), chosen_tx)

    # --- managing ---

    async def retry_job(self, *, job_id: str, tx: object = None) -> AddJobResult | None:
        """Re-arm a settled job's own row to ``pending``; ``None`` if unknown or active."""
        return await self._run(operations.retry(self._settings, job_id), tx)

    async def cancel_job(self, *, job_id: str, tx: object = None) -> CancelResult:
        """Cancel a pending job, or signal a running one's handler to stop."""
        return await self._run(operations.cancel(self._settings, job_id), tx)

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

    async def pause_queue(
        self, *, queue: str, mode: PauseMode = PauseMode.PROCESSING, tx: object = None
    ) -> QueueInfo:
        """Pause ``queue`` cluster-wide: stop claiming, and with ``ALL`` refuse adds."""
        return await self._run(operations.pause(self._settings, queue, mode), tx)

    async def resume_queue(self, *, queue: str, tx: object = None) -> QueueInfo:
        """Undo ``pause_queue``."""
        return await self._run(operations.resume(self._settings, queue), tx)

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
