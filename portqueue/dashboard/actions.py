"""The dashboard's actions: each a POST whose form must carry the CSRF token.

Every handler here is wrapped by ``action``, which refuses (403, nothing done)
a form whose token does not match the browser's cookie before the handler
runs. After acting, the browser is redirected (303) to a page showing the
result, so reloading that page never repeats the action.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import wraps
from typing import Any

from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from portqueue import parsing
from portqueue.dashboard import params
from portqueue.dashboard.csrf import CSRF_FIELD, csrf_ok
from portqueue.dashboard.render import link, render
from portqueue.dashboard.views import client_of
from portqueue.errors import InvalidArgument, QueueNotEmpty, QueuePausedError
from portqueue.operations import added_job_id
from portqueue.types import CancelOutcome

# Above the client's default 1 MiB payload limit, with room for form encoding.
MAX_FORM_BYTES = 4 * 1024 * 1024

Handler = Callable[[Request, FormData], Awaitable[Response]]


def action(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    @wraps(handler)
    async def checked(request: Request) -> Response:
        length = request.headers.get("content-length")
        if length is not None and parsing.integer(
                "content-length", length, minimum=0, maximum=2**63 - 1) > MAX_FORM_BYTES:
            raise HTTPException(413, "The form is too large.")
        form = await request.form()
        if not csrf_ok(request.scope, form.get(CSRF_FIELD)):
            raise HTTPException(
                403, "The form's security token is missing or stale: reload the page and retry.")
        return await handler(request, form)

    return checked


def _see(request: Request, path: str, **query: str) -> RedirectResponse:
    return RedirectResponse(link(request, path, **query), status_code=303)


def _text(form: FormData, name: str) -> str:
    value = form.get(name, "")
    if not isinstance(value, str):
        raise InvalidArgument(name, "expected a text field, not a file")
    return value


def _job_page(request: Request, job_id: str, notice: str) -> RedirectResponse:
    return _see(request, f"/jobs/{job_id}", notice=notice)


@action
async def retry(request: Request, form: FormData) -> Response:
    job_id = request.path_params["job_id"]
    result = await client_of(request).retry_job(job_id=job_id)
    return _job_page(request, job_id, "retried" if result is not None else "not_retried")


_CANCEL_NOTICES = {
    CancelOutcome.CANCELLED: "cancelled",
    CancelOutcome.SIGNALLED: "signalled",
    CancelOutcome.NOT_FOUND: "cancel_not_found",
    CancelOutcome.ALREADY_FINISHED: "cancel_already_finished",
}


@action
async def cancel(request: Request, form: FormData) -> Response:
    job_id = request.path_params["job_id"]
    result = await client_of(request).cancel_job(job_id=job_id)
    return _job_page(request, job_id, _CANCEL_NOTICES[result.outcome])


@action
async def remove(request: Request, form: FormData) -> Response:
    job_id = request.path_params["job_id"]
    client = client_of(request)
    snapshot = await client.get_job(job_id=job_id)
    if snapshot is None or not await client.remove_job(job_id=job_id):
        return _job_page(request, job_id, "not_removed")
    return _see(request, "/jobs", queue=snapshot.queue, notice="removed")


@action
async def pause(request: Request, form: FormData) -> Response:
    queue = params.queue({"queue": _text(form, "queue")})
    mode = params.pause_mode({"mode": _text(form, "mode")})
    if queue is None:
        raise InvalidArgument("queue", "name the queue to pause")
    await client_of(request).pause_queue(queue=queue, mode=mode)
    return _see(request, "/", notice="paused")


@action
async def resume(request: Request, form: FormData) -> Response:
    queue = params.queue({"queue": _text(form, "queue")})
    if queue is None:
        raise InvalidArgument("queue", "name the queue to resume")
    await client_of(request).resume_queue(queue=queue)
    return _see(request, "/", notice="resumed")


@action
async def remove_queue(request: Request, form: FormData) -> Response:
    queue = params.queue({"queue": _text(form, "queue")})
    if queue is None:
        raise InvalidArgument("queue", "name the queue to remove")
    try:
        removed = await client_of(request).remove_queue(queue=queue)
    except QueueNotEmpty:
        return _see(request, "/", notice="queue_not_empty")
    return _see(request, "/", notice="queue_removed" if removed else "queue_not_removed")


@action
async def add(request: Request, form: FormData) -> Response:
    fields = {name: _text(form, name) for name in ("queue", "data", "priority", "group_id")}
    try:
        added = await client_of(request).add_job(
            queue=fields["queue"], data=params.json_data(fields["data"]),
            priority=params.priority(fields["priority"]), group_id=fields["group_id"] or None)
    except (InvalidArgument, QueuePausedError) as exc:
        # Nothing was written: show the form again with what was typed.
        status = 409 if isinstance(exc, QueuePausedError) else 400
        context: dict[str, Any] = {"form": fields, "error": str(exc)}
        return render(request, "add.html", context, status_code=status)
    return _job_page(request, added_job_id(added), "added")


@action
async def remove_schedule(request: Request, form: FormData) -> Response:
    removed = await client_of(request).remove_schedule(
        schedule_id=request.path_params["schedule_id"])
    return _see(request, "/schedules", notice="schedule_removed" if removed
                else "schedule_not_removed")
