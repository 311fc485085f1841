"""The operator pages across queues: workers, failures, activity (GET only)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from portqueue import insight
from portqueue.dashboard import params
from portqueue.dashboard.refresh import refresh_of
from portqueue.dashboard.render import render
from portqueue.dashboard.views import client_of, queue_names

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
