"""``serve``: run the dashboard with uvicorn until interrupted."""

from __future__ import annotations

import asyncio
import ipaddress
import logging

import uvicorn

from portqueue import validation
from portqueue.async_client import AsyncPortQueue
from portqueue.dashboard.app import create_app
from portqueue.dashboard.auth import credentials
from portqueue.errors import InvalidArgument

log = logging.getLogger("portqueue.dashboard")


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
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
) -> None:
    """Serve the dashboard on ``host:port`` until SIGINT/SIGTERM (blocking).

    Binds the loopback interface by default. ``auth`` ("user:password") turns
    on HTTP Basic, ``token`` a bearer token (see ``create_app``). Binding any
    other address without either logs a warning: every action would be open to
    whoever reaches the port. Bad arguments raise ``ValueError`` before
    anything starts.
    """
    validation.schema_name(schema)
    checked_port = validation.integer("port", port, minimum=0, maximum=65_535)
    accepted = credentials(auth, token)
    if not isinstance(host, str) or not host:
        raise InvalidArgument("host", "expected a host name or address")
    if not accepted.required and not _loopback(host):
        log.warning("dashboard on %s without --auth or --token: anyone who can reach "
                    "this address can retry, cancel and remove jobs", host)
    asyncio.run(_serve(dsn, schema, host, checked_port, auth, token))


async def _serve(
    dsn: str, schema: str, host: str, port: int, auth: str | None, token: str | None
) -> None:
    async with AsyncPortQueue(dsn, schema=schema, application_name="portqueue-dashboard") as client:
        # Fail at start, not on the first page view, when the database or schema is wrong.
        await client.get_queues(limit=1)
        app = create_app(client, auth=auth, token=token)
        config = uvicorn.Config(
            app, host=host, port=port, server_header=False, proxy_headers=False,
            log_level="info")
        await uvicorn.Server(config).serve()
