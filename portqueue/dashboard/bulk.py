"""Retry or cancel every job of a filtered list: a confirmation page (GET),
then the action (a CSRF-checked POST) that reports how many it acted on.

The selection is the list's own filters (queue, status, group), never a list
of ids from the browser: the page says how many match now, and the POST acts
on what matches when it runs, at most ``insight.MAX_BULK`` jobs per submit,
in one statement (``retry_jobs``, ``cancel_jobs``) that re-checks each job as
its single-job button's call does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from portqueue import insight
from portqueue.async_client import AsyncPortQueue
from portqueue.dashboard import params
from portqueue.dashboard.actions import action
from portqueue.dashboard.render import link, render
from portqueue.dashboard.views import CANCELLABLE, RETRYABLE, client_of
from portqueue.errors import InvalidArgument
from portqueue.types import JobStatus

APPLIES_TO = {"retry": RETRYABLE, "cancel": CANCELLABLE}
LABELS = {"retry": "Retry", "cancel": "Cancel"}
# Where the browser goes back to: a fixed choice, never a URL from the request.
RETURNS = ("jobs", "failures")


def _verb(values: Mapping[str, Any]) -> str:
    verb = values.get("action") or ""
    if verb not in APPLIES_TO:
        raise InvalidArgument("action", "expected 'retry' or 'cancel'")
    return str(verb)


def _selection(values: Mapping[str, Any], verb: str) -> insight.Selection:
    status = params.status(values)
    allowed = APPLIES_TO[verb]
    if status is not None and status not in allowed:
        names = ", ".join(sorted(s.value for s in allowed))
        raise InvalidArgument("status", f"{verb} applies to {names} jobs, not {status.value}")
    statuses = [status] if status is not None else sorted(allowed, key=list(JobStatus).index)
    return insight.selection(params.queue(values), statuses, params.optional(values, "group"))


def _return_to(values: Mapping[str, Any]) -> str:
    back = values.get("back") or "jobs"
    if back not in RETURNS:
        raise InvalidArgument("back", "expected 'jobs' or 'failures'")
    return str(back)


def _filters(chosen: insight.Selection) -> dict[str, str | None]:
    status = chosen.statuses[0].value if len(chosen.statuses) == 1 else None
    return {"queue": chosen.queue, "status": status, "group": chosen.group_id}


async def confirm(request: Request) -> Response:
    """The confirmation: what will be acted on and how many jobs match now."""
    query = request.query_params
    verb = _verb(query)
    chosen = _selection(query, verb)
    back = _return_to(query)
    matched = await insight.read_async(client_of(request), insight.matching_count,
                                       chosen=chosen)
    return render(request, "bulk.html", {
        "verb": verb, "label": LABELS[verb], "chosen": chosen, "filters": _filters(chosen),
        "matched": matched, "limit": insight.MAX_BULK, "back": back})


async def _act(client: AsyncPortQueue, verb: str, job_ids: list[str]) -> int:
    """How many of ``job_ids`` were retried, or cancelled or signalled to stop."""
    if verb == "retry":
        return await client.retry_jobs(job_ids=job_ids)
    return int(await client.cancel_jobs(job_ids=job_ids))


@action
async def run(request: Request, form: FormData) -> Response:
    values = {name: value for name, value in form.items() if isinstance(value, str)}
    verb = _verb(values)
    chosen = _selection(values, verb)
    back = _return_to(values)
    client = client_of(request)
    matched = await insight.read_async(client, insight.matching_count, chosen=chosen)
    ids = await insight.read_async(client, insight.matching_ids, chosen=chosen)
    # A job that moved on since the read (finished, removed, retried
    # elsewhere) is passed over by the statement and counted as skipped.
    acted = await _act(client, verb, list(ids)) if ids else 0
    filters = _filters(chosen)
    if back == "failures":
        filters = {"queue": chosen.queue}
    notice = "bulk_retried" if verb == "retry" else "bulk_cancelled"
    target = link(request, f"/{back}", notice=notice, count=acted, matched=matched, **filters)
    return RedirectResponse(target, status_code=303)
