"""The dashboard as an ASGI application: routes, error pages and middleware."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from importlib import resources

import psycopg
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp

from portqueue.async_client import AsyncPortQueue
from portqueue.dashboard import actions, bulk, flow_views, hosts, insight_views, views
from portqueue.dashboard.auth import AuthMiddleware, credentials
from portqueue.dashboard.csrf import CsrfMiddleware
from portqueue.dashboard.headers import HeadersMiddleware
from portqueue.dashboard.hosts import HostMiddleware
from portqueue.dashboard.render import render
from portqueue.dashboard.sessions import DEFAULT_SESSION_LIFETIME_SECONDS
from portqueue.errors import InvalidArgument

log = logging.getLogger("portqueue.dashboard")

_STYLESHEET = resources.files("portqueue.dashboard").joinpath("static/style.css").read_bytes()


async def stylesheet(request: Request) -> Response:
    return Response(_STYLESHEET, media_type="text/css")


async def _http_error(request: Request, exc: Exception) -> Response:
    if not isinstance(exc, HTTPException):  # registered for HTTPException only
        raise exc
    context = {"status_code": exc.status_code, "message": exc.detail}
    response = render(request, "error.html", context, status_code=exc.status_code)
    if exc.headers:
        response.headers.update(exc.headers)
    return response


async def _bad_input(request: Request, exc: Exception) -> Response:
    return render(request, "error.html", {"status_code": 400, "message": str(exc)},
                  status_code=400)


async def _database_down(request: Request, exc: Exception) -> Response:
    # The error text may name the host or user: log it, show a plain message.
    log.error("dashboard: database error on %s: %s", request.url.path, exc)
    message = "The database did not answer; try again in a moment."
    return render(request, "error.html", {"status_code": 503, "message": message},
                  status_code=503)


ROUTES = [
    Route("/", views.queues, methods=["GET"]),
    Route("/jobs", views.jobs, methods=["GET"]),
    Route("/jobs/new", views.new_job, methods=["GET"]),
    Route("/jobs/new", actions.add, methods=["POST"]),
    Route("/jobs/{job_id}", views.job, methods=["GET"]),
    Route("/jobs/{job_id}/retry", actions.retry, methods=["POST"]),
    Route("/jobs/{job_id}/cancel", actions.cancel, methods=["POST"]),
    Route("/jobs/{job_id}/remove", actions.remove, methods=["POST"]),
    Route("/queues/pause", actions.pause, methods=["POST"]),
    Route("/queues/resume", actions.resume, methods=["POST"]),
    Route("/queues/remove", actions.remove_queue, methods=["POST"]),
    Route("/schedules", views.schedules, methods=["GET"]),
    Route("/flows/{flow_id}", flow_views.flow, methods=["GET"]),
    Route("/workers", insight_views.workers, methods=["GET"]),
    Route("/failures", insight_views.failures, methods=["GET"]),
    Route("/activity", insight_views.activity, methods=["GET"]),
    Route("/bulk", bulk.confirm, methods=["GET"]),
    Route("/bulk", bulk.run, methods=["POST"]),
    Route("/schedules/{schedule_id}/remove", actions.remove_schedule, methods=["POST"]),
    Route("/static/style.css", stylesheet, methods=["GET"]),
]


def create_app(
    client: AsyncPortQueue,
    *,
    auth: str | None = None,
    token: str | None = None,
    csrf_secret: bytes | None = None,
    allowed_hosts: Iterable[str] | None = None,
    session_lifetime_seconds: int = DEFAULT_SESSION_LIFETIME_SECONDS,
) -> ASGIApp:
    """The dashboard as an ASGI app reading and acting through ``client``.

    ``auth`` ("user:password") requires HTTP Basic credentials; ``token``
    requires ``Authorization: Bearer <token>``, or a ``?token=<token>`` link
    once (it is exchanged for a session cookie that lasts
    ``session_lifetime_seconds``, default 12 hours). With both, either is
    accepted; with neither, anyone who can reach the port can use it.
    ``csrf_secret`` (default: random per process) keys the forms' CSRF tokens;
    give several processes behind one address the same secret.

    Only requests whose ``Host`` is ``localhost``, ``127.0.0.1``, ``[::1]``
    (any port) or one of ``allowed_hosts`` (names or addresses, no port) are
    served; any other gets 421, which defeats DNS rebinding. List the names
    browsers use to reach the dashboard (``["dash.example.com"]``); ``["*"]``
    turns the check off, for a proxy in front that checks ``Host`` itself.

    The caller owns ``client``: the app never closes it. Bad ``auth``,
    ``token``, ``allowed_hosts`` or ``session_lifetime_seconds`` values raise
    ``ValueError`` here.
    """
    accepted = credentials(auth, token, session_lifetime_seconds)
    served = hosts.allowed_hosts(allowed_hosts)
    app = Starlette(
        routes=ROUTES,
        exception_handlers={HTTPException: _http_error, InvalidArgument: _bad_input,
                            psycopg.OperationalError: _database_down},
        middleware=[
            Middleware(HeadersMiddleware),
            # Before authentication and the CSRF cookie: a refused Host gets neither.
            Middleware(HostMiddleware, allowed=served),
            Middleware(AuthMiddleware, credentials=accepted),
            Middleware(CsrfMiddleware, secret=csrf_secret),
        ],
    )
    app.state.client = client
    return app
