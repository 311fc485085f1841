"""The dashboard's pages (GET only: reading never changes anything)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from portqueue.async_client import AsyncPortQueue
from portqueue.dashboard import params
from portqueue.dashboard.refresh import refresh_of
from portqueue.dashboard.render import parse_timestamp, render
from portqueue.dashboard.throughput import Throughput, recent_throughput
from portqueue.errors import InvalidArgument
from portqueue.types import FINISHED_STATUSES, JobSnapshot, JobStatus, QueueInfo, QueueStats
from portqueue.validation import MAX_PAGE

# Statuses an operator may act on from the job page.
RETRYABLE = FINISHED_STATUSES
CANCELLABLE = frozenset({JobStatus.PENDING, JobStatus.ACTIVE, JobStatus.WAITING})


def client_of(request: Request) -> AsyncPortQueue:
    client: AsyncPortQueue = request.app.state.client
    return client


@dataclass(frozen=True)
class QueueRow:
    info: QueueInfo
    stats: QueueStats
    throughput: Throughput

    @property
    def removable(self) -> bool:
        """No unfinished job: remove_queue would take it (the button shows)."""
        return all(count == 0 for status, count in self.stats.counts.items()
                   if status not in FINISHED_STATUSES)


async def _queue_row(client: AsyncPortQueue, info: QueueInfo) -> QueueRow:
    stats, throughput = await asyncio.gather(
        client.get_queue_stats(queue=info.queue), recent_throughput(client, info.queue))
    return QueueRow(info, stats, throughput)


async def queues(request: Request) -> Response:
    client = client_of(request)
    number = params.page_number(request.query_params)
    refresh = refresh_of(request)
    page = await client.get_queues(limit=params.PAGE_SIZE, offset=params.offset(number))
    rows = await asyncio.gather(*(_queue_row(client, info) for info in page.items))
    return render(request, "queues.html", {
        "rows": rows, "paging": params.Paging(number, page.total), "page_params": {},
        "refresh": refresh})


async def queue_names(client: AsyncPortQueue) -> list[str]:
    page = await client.get_queues(limit=MAX_PAGE)
    return sorted(info.queue for info in page.items)


async def jobs(request: Request) -> Response:
    client = client_of(request)
    query = request.query_params
    queue = params.queue(query)
    status = params.status(query)
    group = params.optional(query, "group")
    number = params.page_number(query)
    refresh = refresh_of(request)
    filters = {"queue": queue, "status": status.value if status else None, "group": group}
    context: dict[str, Any] = {"filters": filters, "queue_names": await queue_names(client)}
    if queue is None:
        # get_jobs reads one queue at a time: ask which.
        return render(request, "jobs.html", {**context, "page": None, "stats": None})
    page, stats = await asyncio.gather(
        client.get_jobs(queue=queue, statuses=[status] if status else None, group_id=group,
                        limit=params.PAGE_SIZE, offset=params.offset(number)),
        client.get_queue_stats(queue=queue))
    return render(request, "jobs.html", {
        **context, "page": page, "stats": stats, "refresh": refresh,
        "paging": params.Paging(number, page.total), "page_params": filters})


@dataclass(frozen=True)
class Event:
    at: datetime | None
    label: str
    detail: str = ""


def timeline(job: JobSnapshot) -> list[Event]:
    """The job's life in time order: created, due, each failed attempt, started, finished."""
    events = [Event(job.created_at, "created")]
    if job.start_after > job.created_at:
        events.append(Event(job.start_after, "due", "start_after"))
    for error in job.errors:
        at = error.get("at")
        events.append(Event(parse_timestamp(at) if isinstance(at, str) else None,
                            f"attempt {error.get('attempt', '?')} failed",
                            str(error.get("type", ""))))
    if job.started_at is not None:
        events.append(Event(job.started_at, f"attempt {job.attempt} started"))
    if job.finished_at is not None:
        events.append(Event(job.finished_at, f"finished: {job.status.value}"))
    if job.expire_at is not None and job.status is JobStatus.PENDING:
        events.append(Event(job.expire_at, "expires if not started by then"))
    known = sorted((e for e in events if e.at is not None), key=lambda e: e.at or job.created_at)
    return known + [e for e in events if e.at is None]


async def job(request: Request) -> Response:
    client = client_of(request)
    refresh = refresh_of(request)
    try:
        snapshot = await client.get_job(job_id=request.path_params["job_id"])
    except InvalidArgument as exc:
        if exc.argument != "job_id":
            raise  # the row itself is unreadable (a column written by SQL): a 400 says why
        snapshot = None  # not a job id: no such job
    if snapshot is None:
        raise HTTPException(404, "No such job: it never existed or has been removed.")
    # Retention keeps a dead-letter copy's source, but remove_job can delete it:
    # link to it only while it is there.
    source_kept = snapshot.source_job_id is not None and (
        await client.get_job(job_id=snapshot.source_job_id)) is not None
    return render(request, "job.html", {
        "job": snapshot, "timeline": timeline(snapshot), "source_kept": source_kept,
        "can_retry": snapshot.status in RETRYABLE,
        "can_cancel": snapshot.status in CANCELLABLE and not snapshot.cancel_requested,
        "can_remove": snapshot.status is not JobStatus.ACTIVE,
        # A finished job's page no longer changes by itself.
        "refresh": None if snapshot.status.finished else refresh,
    })


async def schedules(request: Request) -> Response:
    client = client_of(request)
    queue = params.queue(request.query_params)
    number = params.page_number(request.query_params)
    page = await client.get_schedules(
        queue=queue, limit=params.PAGE_SIZE, offset=params.offset(number))
    return render(request, "schedules.html", {
        "page": page, "paging": params.Paging(number, page.total),
        "filters": {"queue": queue}, "page_params": {"queue": queue}})


async def new_job(request: Request) -> Response:
    form = {"queue": request.query_params.get("queue", ""), "data": "{}", "priority": "",
            "group_id": ""}
    return render(request, "add.html", {"form": form, "error": None})
