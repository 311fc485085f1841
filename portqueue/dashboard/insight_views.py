"""The operator pages across queues: workers, failures, activity (GET only)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from starlette.requests import Request
from starlette.responses import Response

from portqueue import insight
from portqueue.dashboard import charts, params
from portqueue.dashboard.refresh import refresh_of
from portqueue.dashboard.render import render
from portqueue.dashboard.views import client_of, queue_names
from portqueue.errors import InvalidArgument

# A worker heartbeats every lease_seconds / 3 (20 s at the default lease); one
# not seen for longer than this has likely missed beats and is shown as stale.
STALE_AFTER_SECONDS = 60.0


async def workers(request: Request) -> Response:
    number = params.page_number(request.query_params)
    refresh = refresh_of(request)
    page = await insight.read_async(client_of(request), insight.workers,
                                    limit=params.PAGE_SIZE, offset=params.offset(number))
    return render(request, "workers.html", {
        "page": page, "paging": params.Paging(number, page.total), "page_params": {},
        "stale_after": STALE_AFTER_SECONDS, "refresh": refresh})


async def failures(request: Request) -> Response:
    query = request.query_params
    queue = params.queue(query)
    number = params.page_number(query)
    refresh = refresh_of(request)
    client = client_of(request)
    page = await insight.read_async(client, insight.failures, queue=queue,
                                    limit=params.PAGE_SIZE, offset=params.offset(number))
    filters = {"queue": queue}
    return render(request, "failures.html", {
        "page": page, "paging": params.Paging(number, page.total), "filters": filters,
        "page_params": filters, "queue_names": await queue_names(client), "refresh": refresh})


# The spans the activity page offers: (bucket seconds, buckets, what a bucket is called).
SPANS = {"1h": (60, 60, "minute"), "6h": (300, 72, "5 minutes"),
         "24h": (900, 96, "15 minutes")}


def _span(query: Mapping[str, str]) -> str:
    span = query.get("span") or "1h"
    if span not in SPANS:
        raise InvalidArgument("span", f"expected one of {', '.join(SPANS)}")
    return span


@dataclass(frozen=True)
class Totals:
    completed: int
    failed: int
    latency_p95_max: float | None

    @property
    def failure_rate(self) -> float | None:
        settled = self.completed + self.failed
        return None if settled == 0 else self.failed / settled


def _totals(buckets: list[insight.Bucket]) -> Totals:
    p95s = [b.latency_p95 for b in buckets if b.latency_p95 is not None]
    return Totals(sum(b.completed for b in buckets), sum(b.failed for b in buckets),
                  max(p95s) if p95s else None)


async def activity(request: Request) -> Response:
    query = request.query_params
    queue = params.queue(query)
    span = _span(query)
    refresh = refresh_of(request)
    client = client_of(request)
    width, count, bucket = SPANS[span]
    buckets = await insight.read_async(client, insight.activity, queue=queue,
                                       bucket_seconds=width, buckets=count)
    starts = [b.starts_at for b in buckets]
    rates = [None if b.failure_rate is None else 100 * b.failure_rate for b in buckets]
    return render(request, "activity.html", {
        "filters": {"queue": queue, "span": span}, "spans": list(SPANS),
        "bucket": bucket, "totals": _totals(buckets),
        "throughput": charts.stacked_bars(
            starts, [("completed", [b.completed for b in buckets]),
                     ("failed", [b.failed for b in buckets])]),
        "failure_rate": charts.lines(starts, [("failed", rates)], "%", floor_top=10),
        "latency": charts.lines(starts, [("p95", [b.latency_p95 for b in buckets]),
                                         ("mean", [b.latency_mean for b in buckets])], "s",
                                floor_top=0.01),
        "queue_names": await queue_names(client), "refresh": refresh})
