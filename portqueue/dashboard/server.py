"""``serve``: run the dashboard with uvicorn until interrupted."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections.abc import Iterable
from typing import Any

import uvicorn

from portqueue import validation
from portqueue.async_client import AsyncPortQueue
from portqueue.dashboard import hosts
from portqueue.dashboard.access_log import ACCESS_LOGGER, RedactToken
from portqueue.dashboard.app import create_app
from portqueue.dashboard.auth import credentials
from portqueue.dashboard.sessions import DEFAULT_SESSION_LIFETIME_SECONDS
from portqueue.errors import InvalidArgument

log = logging.getLogger("portqueue.dashboard")


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _unspecified(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


def serve(
    *,
    dsn: str,
    schema: str = "portqueue",
    host: str = "127.0.0.1",
    port: int = 8080,
    auth: str | None = None,
    token: str | None = None,
    allowed_hosts: Iterable[str] | None = None,
    session_lifetime_seconds: int = DEFAULT_SESSION_LIFETIME_SECONDS,
) -> None:
    """Serve the dashboard on ``host:port`` until SIGINT/SIGTERM (blocking).

    Binds the loopback interface by default. ``auth`` ("user:password") turns
    on HTTP Basic, ``token`` a bearer token (see ``create_app``). Binding any
    other address without either logs a warning: every action would be open to
    whoever reaches the port. Requests are served for ``Host`` names that are
    loopback, ``host`` itself or in ``allowed_hosts``; others get 421 (see
    ``create_app``). The access log never shows a ``?token=`` value. Bad
    arguments raise ``ValueError`` before anything starts.
    """
    validation.schema_name(schema)
    checked_port = validation.integer("port", port, minimum=0, maximum=65_535)
    accepted = credentials(auth, token, session_lifetime_seconds)
    if not isinstance(host, str) or not host:
        raise InvalidArgument("host", "expected a host name or address")
    served = [*hosts.allowed_hosts(allowed_hosts, bound=host)]
    if not accepted.required and not _loopback(host):
        log.warning("dashboard on %s without --auth or --token: anyone who can reach "
                    "this address can retry, cancel and remove jobs", host)
    if _unspecified(host) and not allowed_hosts:
        log.warning("dashboard on %s: requests are served only under loopback names; list "
                    "the names browsers use to reach it with --allow-host", host)
    settings = {"auth": auth, "token": token, "allowed_hosts": served,
                "session_lifetime_seconds": session_lifetime_seconds}
    asyncio.run(_serve(dsn, schema, host, checked_port, settings))


async def _serve(dsn: str, schema: str, host: str, port: int, settings: dict[str, Any]) -> None:
    async with AsyncPortQueue(dsn, schema=schema, application_name="portqueue-dashboard") as client:
        # Fail at start, not on the first page view, when the database or schema is wrong.
        await client.get_queues(limit=1)
        app = create_app(client, **settings)
        config = uvicorn.Config(
            app, host=host, port=port, server_header=False, proxy_headers=False,
            log_level="info")
        # After Config: it (re)configures uvicorn's loggers.
        access_log = logging.getLogger(ACCESS_LOGGER)
        redact = RedactToken()
        access_log.addFilter(redact)
        try:
            await uvicorn.Server(config).serve()
        finally:
            access_log.removeFilter(redact)
