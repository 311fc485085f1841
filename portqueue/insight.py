"""Operator reads across queues: live workers, failures, activity over time.

The dashboard's workers, failures and activity pages and the ``portqueue
workers`` / ``portqueue failures`` commands read through these operations
(sql/insight.sql), sync or async, on a client's pool (``read_sync`` /
``read_async``). They are not on the client: they serve operators, not
application code, and may change shape with the dashboard.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from portqueue import validation
from portqueue.async_client import AsyncPortQueue
from portqueue.client import PortQueue
from portqueue.driver import Operation
from portqueue.errors import InvalidArgument
from portqueue.operations import job_snapshot
from portqueue.settings import Settings
from portqueue.types import JobSnapshot, JobStatus, Page

T = TypeVar("T")

# A bulk action works through at most this many jobs per submit: the page
# says how many matched, and a second submit takes the next ones.
MAX_BULK = 1000
MAX_BUCKETS = 1440


@dataclass(frozen=True)
class WorkerInfo:
    """One registered worker process, as its heartbeat last wrote it."""

    worker_id: str
    instance_key: str | None
    hostname: str
    pid: int
    queues: list[str]
    concurrency: int
    started_at: datetime
    last_seen_at: datetime
    seen_seconds_ago: float  # by the database's clock
    running: int  # its active jobs in the job table


@dataclass(frozen=True)
class Failure:
    """A failed job with its newest error's message (the ``error`` column)."""

    job: JobSnapshot
    error: str | None

    @property
    def error_type(self) -> str | None:
        last = self.job.errors[-1] if self.job.errors else None
        return None if last is None else str(last.get("type", "")) or None


@dataclass(frozen=True)
class Bucket:
    """One interval of the activity series: settled jobs and start latency."""

    starts_at: datetime
    completed: int
    failed: int
    latency_mean: float | None  # seconds; None when no attempt started in it
    latency_p95: float | None

    @property
    def settled(self) -> int:
        return self.completed + self.failed

    @property
    def failure_rate(self) -> float | None:
        return None if self.settled == 0 else self.failed / self.settled


def _worker(row: dict[str, Any]) -> WorkerInfo:
    return WorkerInfo(
        worker_id=str(row["id"]), instance_key=row["instance_key"], hostname=row["hostname"],
        pid=int(row["pid"]), queues=list(row["queues"]), concurrency=int(row["concurrency"]),
        started_at=row["started_at"], last_seen_at=row["last_seen_at"],
        seen_seconds_ago=float(row["seen_seconds_ago"]), running=int(row["running"]))


def workers(settings: Settings, limit: object = validation.MAX_PAGE,
            offset: object = 0) -> Operation[Page[WorkerInfo]]:
    """Every registered worker (a page), by host and pid."""
    checked_limit, checked_offset = validation.window(limit, offset)
    q = settings.queries
    rows = yield q("worker_list", limit=checked_limit, offset=checked_offset)
    (count,) = yield q("worker_count")
    return Page(items=[_worker(row) for row in rows], total=int(count["total"]))


def _optional_queue(queue: object) -> str | None:
    return None if queue is None else validation.queue_name(queue)


def failures(settings: Settings, queue: object = None, limit: object = 20,
             offset: object = 0) -> Operation[Page[Failure]]:
    """Failed jobs of every queue (or of ``queue``), newest failure first."""
    checked_queue = _optional_queue(queue)
    checked_limit, checked_offset = validation.window(limit, offset)
    q = settings.queries
    rows = yield q("failure_page", queue=checked_queue, limit=checked_limit,
                   offset=checked_offset)
    (count,) = yield q("failure_count", queue=checked_queue)
    if not rows:
        return Page(items=[], total=int(count["total"]))
    snapshots = yield q("jobs_by_id", job_ids=[str(row["id"]) for row in rows])
    by_id = {str(row["id"]): job_snapshot(row) for row in snapshots}
    # A row deleted between the two reads is left out rather than shown empty.
    items = [Failure(by_id[str(row["id"])], row["error"]) for row in rows
             if str(row["id"]) in by_id]
    return Page(items=items, total=int(count["total"]))


@dataclass(frozen=True)
class Selection:
    """A filtered list of jobs a bulk action works through."""

    queue: str | None  # None: every queue
    statuses: tuple[JobStatus, ...]
    group_id: str | None = None

    def params(self) -> dict[str, Any]:
        return {"queue": self.queue, "statuses": [s.value for s in self.statuses],
                "group_id": self.group_id}


def selection(queue: object, statuses: Sequence[JobStatus], group_id: object) -> Selection:
    if not statuses:
        raise InvalidArgument("status", "pick the statuses to act on")
    return Selection(_optional_queue(queue), tuple(statuses),
                     validation.optional_text("group_id", group_id))


def matching_count(settings: Settings, chosen: Selection) -> Operation[int]:
    q = settings.queries
    (row,) = yield q("matching_job_count", **chosen.params())
    return int(row["total"])


def matching_ids(settings: Settings, chosen: Selection) -> Operation[list[str]]:
    """The first ``MAX_BULK`` matching job ids, oldest first."""
    q = settings.queries
    rows = yield q("matching_job_ids", limit=MAX_BULK, **chosen.params())
    return [str(row["id"]) for row in rows]


def activity(settings: Settings, queue: object = None, bucket_seconds: object = 60,
             buckets: object = 60) -> Operation[list[Bucket]]:
    """The last ``buckets`` intervals of ``bucket_seconds``, oldest first."""
    checked_queue = _optional_queue(queue)
    width = validation.integer("bucket_seconds", bucket_seconds, minimum=1, maximum=86_400)
    count = validation.integer("buckets", buckets, minimum=1, maximum=MAX_BUCKETS)
    q = settings.queries
    rows = yield q("activity", queue=checked_queue, bucket_seconds=width, buckets=count)
    return [Bucket(starts_at=row["starts_at"], completed=int(row["completed"]),
                   failed=int(row["failed"]), latency_mean=row["latency_mean"],
                   latency_p95=row["latency_p95"]) for row in rows]


Reader = Callable[..., Operation[T]]


async def read_async(client: AsyncPortQueue, reader: Reader[T], **arguments: Any) -> T:
    """``reader(**arguments)`` on ``client``'s schema and pool, as its own reads run."""
    return await client._run(reader(client._settings, **arguments))


def read_sync(client: PortQueue, reader: Reader[T], tx: object = None, **arguments: Any) -> T:
    """The same on a sync client, in ``tx`` when given."""
    return client._run(reader(client._settings, **arguments), tx)
