"""``portqueue dashboard``: serve the web dashboard (the ``dashboard`` extra)."""

from __future__ import annotations

from typing import Annotated

import psycopg
import typer

from portqueue.cli.base import (
    EXIT_FAILURE,
    EXIT_USAGE,
    DsnOption,
    SchemaOption,
    app,
    checked_schema,
    describe,
    fail,
    redact,
    require_dsn,
)
from portqueue.cli.session import check_connection
from portqueue.errors import InvalidArgument, PortQueueError

# serve()'s argument names as this command spells them.
OPTION_NAMES = {"allowed_hosts": "allow-host", "session_lifetime_seconds": "session-lifetime"}


def _names(values: list[str] | None) -> list[str]:
    return [name.strip() for value in values or [] for name in value.split(",") if name.strip()]


@app.command("dashboard")
def dashboard_command(
    host: Annotated[str, typer.Option(
        "--host", help="Address to listen on; anything but loopback exposes the dashboard "
        "to the network (use --auth or --token then).")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="Port to listen on.")]
    = 8080,
    auth: Annotated[str | None, typer.Option(
        "--auth", envvar="PORTQUEUE_DASHBOARD_AUTH",
        help="Require HTTP basic auth, as user:password.", show_default=False)] = None,
    token: Annotated[str | None, typer.Option(
        "--token", envvar="PORTQUEUE_DASHBOARD_TOKEN",
        help="Require this bearer token (8 characters or more).", show_default=False)] = None,
    allow_host: Annotated[list[str] | None, typer.Option(
        "--allow-host", help="Also serve requests whose Host is this name or address (repeat "
        "or comma-separate for several; '*' for any). Loopback names and --host are always "
        "served; any other Host gets 421 (DNS rebinding).", show_default=False)] = None,
    session_lifetime: Annotated[int | None, typer.Option(
        "--session-lifetime", help="Seconds the session a ?token= link opens lasts "
        "(default 43200: 12 hours).", show_default=False)] = None,
    dsn: DsnOption = None,
    schema: SchemaOption = "portqueue",
) -> None:
    """Serve the web dashboard: queues, jobs, schedules; retry, cancel, remove, pause.

    Prefer the environment for secrets (PORTQUEUE_DASHBOARD_AUTH,
    PORTQUEUE_DASHBOARD_TOKEN): options show up in process lists. Runs until
    interrupted. Needs `pip install 'portqueue\\[dashboard]'` (exit 2 without).

    Examples:

        portqueue dashboard --port 8080

        PORTQUEUE_DASHBOARD_AUTH=ops:s3cret portqueue dashboard --host 0.0.0.0 \\
            --allow-host dash.example.com
    """
    dsn = require_dsn(dsn)
    schema = checked_schema(schema)
    try:
        # Here, not at the top: the dashboard's dependencies are an optional extra.
        from portqueue.dashboard import serve
    except ImportError as exc:
        fail(EXIT_USAGE, "the dashboard needs its extra: pip install 'portqueue[dashboard]' "
             f"({exc})")
    check_connection(dsn)
    try:
        lifetime = {} if session_lifetime is None else {
            "session_lifetime_seconds": session_lifetime}
        serve(dsn=dsn, schema=schema, host=host, port=port, auth=auth, token=token,
              allowed_hosts=_names(allow_host), **lifetime)
    except KeyboardInterrupt:
        return
    except InvalidArgument as exc:  # the dashboard checks its options
        fail(EXIT_USAGE, f"--{OPTION_NAMES.get(exc.argument, exc.argument)}"
             f"{str(exc)[len(exc.argument):]}")
    except (PortQueueError, psycopg.Error, OSError) as exc:  # the port is taken, no schema
        fail(EXIT_FAILURE, f"dashboard failed: {redact(describe(exc), dsn)}")
