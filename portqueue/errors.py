"""One exception hierarchy, rooted at :class:`PortQueueError`."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from portqueue.types import JobSnapshot


class PortQueueError(Exception):
    """The root of every error portqueue raises on purpose."""


class InvalidArgument(PortQueueError, ValueError):
    """An argument was rejected before any I/O; ``argument`` names it."""

    def __init__(self, argument: str, message: str) -> None:
        super().__init__(f"{argument}: {message}")
        self.argument = argument


class PayloadTooLarge(InvalidArgument):
    """A job's encoded ``data`` is larger than the client's ``max_payload_bytes``."""


class QueuePausedError(PortQueueError):
    """The queue is paused with ``PauseMode.ALL`` and refuses new jobs."""

    def __init__(self, queue: str) -> None:
        super().__init__(f"queue {queue!r} is paused (mode ALL) and refuses new jobs")
        self.queue = queue


class QueueNotEmpty(PortQueueError):
    """``remove_queue`` refused: the queue still has unfinished jobs (``unfinished``
    of them, pending or active). Nothing was removed."""

    def __init__(self, queue: str, unfinished: int) -> None:
        super().__init__(
            f"queue {queue!r} has {unfinished} unfinished job(s) (pending or active): cancel "
            "or remove them first (running ones must finish); nothing was removed")
        self.queue = queue
        self.unfinished = unfinished


class SchemaNotMigrated(PortQueueError):
    """The schema holds no portqueue tables (a database never migrated, or the
    wrong ``schema``): run ``portqueue migrate`` (or ``PortQueue.migrate()``)."""

    def __init__(self, schema: str) -> None:
        super().__init__(f"schema {schema!r} has no portqueue tables: run `portqueue migrate` "
                         "(or pass the right --schema)")
        self.schema = schema


class JobFailedError(PortQueueError):
    """A waited-for job ended failed, cancelled or expired; ``job`` is its snapshot."""

    def __init__(self, job: JobSnapshot) -> None:
        last = job.errors[-1]["message"] if job.errors else None
        detail = f": {last}" if last else ""
        super().__init__(f"job {job.job_id} ended {job.status.value}{detail}")
        self.job = job


class JobDeletedError(PortQueueError):
    """A waited-for job finished, then its row was deleted before the wait could
    read it: removed (``remove_job``), or pruned by retention while the wait
    was stalled for longer than the pruner keeps a waited-for job
    (docs/retention.md). Its result is gone; ``job_id`` names it."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"job {job_id} finished and was deleted before the wait read it")
        self.job_id = job_id


class DatabaseUnavailable(PortQueueError):
    """PostgreSQL could not take the request right now: the connection failed or
    broke, the server is starting or shutting down, has no free connection, or
    is read-only (a failover in progress, ``default_transaction_read_only``).

    Retryable: nothing was written. Raised by the client's own connections
    (with ``tx=``, your driver's error reaches you as it raised it); the
    original error is ``__cause__`` and its SQLSTATE is ``sqlstate`` (``None``
    when the connection itself failed)."""

    def __init__(self, message: str, sqlstate: str | None = None) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate
