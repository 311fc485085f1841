"""``portqueue worker``: a managed worker process for the handlers on a user's client."""

from __future__ import annotations

import atexit
import importlib
import logging
import os
import sys
import threading
import time
from typing import Annotated, Any

import psycopg
import typer

from portqueue.async_client import AsyncPortQueue
from portqueue.cli.base import EXIT_FAILURE, EXIT_USAGE, app, redact
from portqueue.cli.base import describe as _describe
from portqueue.cli.base import fail as _fail
from portqueue.client import PortQueue
from portqueue.errors import InvalidArgument, PortQueueError, SchemaNotMigrated
from portqueue.worker.host import run_until_stopped
from portqueue.worker.runtime import DEFAULT_CONNECTIONS, LISTEN_HEALTH_SECONDS


@app.command("worker")
def worker_command(
    target: Annotated[str, typer.Argument(
        help="Where your client is: MODULE:ATTRIBUTE, e.g. myapp.jobs:pq.",
        show_default=False)],
    queues: Annotated[str | None, typer.Option(
        "--queues", help="Comma-separated queues to consume (default: every queue with "
        "a handler).", show_default=False)] = None,
    concurrency: Annotated[int | None, typer.Option(
        "--concurrency", help="Override every queue's concurrency.", show_default=False)] = None,
    instance_key: Annotated[str | None, typer.Option(
        "--instance-key", envvar="PORTQUEUE_INSTANCE_KEY",
        help="This instance's key, matched by preferred_instance_key_pattern.",
        show_default=False)] = None,
    dsn: Annotated[str | None, typer.Option(
        "--dsn", envvar="PORTQUEUE_DSN", help="Override the client's connection string.",
        show_default=False)] = None,
    schema: Annotated[str | None, typer.Option(
        "--schema", envvar="PORTQUEUE_SCHEMA", help="Override the client's schema.",
        show_default=False)] = None,
    poll_interval: Annotated[float, typer.Option(
        "--poll-interval", help="Seconds between polls when no NOTIFY arrives.")] = 1.0,
    grace_seconds: Annotated[float, typer.Option(
        "--grace-seconds", help="How long SIGTERM waits for running jobs.")] = 30.0,
    listen_check_seconds: Annotated[float, typer.Option(
        "--listen-check-seconds",
        help="Probe the LISTEN connection after this long without traffic; a dead one "
        "is replaced.")] = LISTEN_HEALTH_SECONDS,
    connections: Annotated[int, typer.Option(
        "--connections", help="The worker's own database connections (at least 3: the "
        "listener, claims and heartbeats, and a pool of the rest).")] = DEFAULT_CONNECTIONS,
    scheduler: Annotated[bool, typer.Option(
        "--scheduler/--no-scheduler", help="Run the scheduler in this process.")] = True,
    maintenance: Annotated[bool, typer.Option(
        "--maintenance/--no-maintenance",
        help="Run maintenance (lease rescue) in this process.")] = True,
    log_level: Annotated[str, typer.Option("--log-level", help="Logging level.")] = "INFO",
    metrics_port: Annotated[int | None, typer.Option(
        "--metrics-port", min=0, max=65535,
        help="Serve Prometheus metrics at http://HOST:PORT/metrics (needs the metrics "
        "extra).", show_default=False)] = None,
    metrics_host: Annotated[str, typer.Option(
        "--metrics-host", help="The address --metrics-port listens on.")] = "127.0.0.1",
) -> None:
    """Run a managed worker for the handlers registered on your client.

    SIGTERM stops claiming, waits for running jobs (up to --grace-seconds) and
    exits 0; a second signal, or SIGINT, aborts: every handler's signal is set
    and unfinished jobs go back to pending at once, without spending an attempt.
    Exits 1 on a fatal error, 2 on a usage error.

    Examples:

        portqueue worker myapp.jobs:pq

        portqueue worker myapp.jobs:pq --queues emails,reports --concurrency 20

        portqueue worker myapp.jobs:pq --metrics-port 9100 --metrics-host 0.0.0.0
    """
    logging.basicConfig(level=log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    client = _load_client(target)
    effective_dsn = dsn or client.dsn
    try:
        # An empty --dsn keeps the app's, as it always has.
        client = client.with_settings(dsn=dsn or None, schema=schema,
                                      instance_key=instance_key)
        if metrics_port is not None:
            _serve_metrics(client, metrics_port, metrics_host)
        options: dict[str, Any] = {
            "queues": None if queues is None else [q.strip() for q in queues.split(",") if q],
            "concurrency": concurrency, "scheduler": scheduler, "maintenance": maintenance,
            "poll_interval": poll_interval, "grace_seconds": grace_seconds,
            "listen_check_seconds": listen_check_seconds, "connections": connections,
        }
        if isinstance(client, AsyncPortQueue):
            run_until_stopped(client.run(**options))
        else:
            client.run(**options)
    except InvalidArgument as exc:
        _fail(EXIT_USAGE, redact(str(exc), effective_dsn))
    except SchemaNotMigrated as exc:
        _finish_worker(EXIT_FAILURE, str(exc))
    except (PortQueueError, psycopg.Error, OSError) as exc:
        _finish_worker(EXIT_FAILURE, f"worker failed: {redact(_describe(exc), effective_dsn)}")
    _finish_worker(0)


def _serve_metrics(client: PortQueue | AsyncPortQueue, port: int, host: str) -> None:
    """Count the worker's jobs and serve them (docs/metrics.md) before it starts."""
    try:
        from portqueue.metrics import instrument, serve
        instrument(client)
    except ImportError as exc:
        _fail(EXIT_USAGE, f"--metrics-port needs the metrics extra "
              f"(pip install 'portqueue[metrics]'): {exc}")
    server, _ = serve(port, host=host)
    logging.getLogger("portqueue.metrics").info(
        "serving metrics at http://%s:%d/metrics", host, server.server_port)


# Threads running sync handlers carry this name prefix (portqueue.worker.runner).
HANDLER_THREAD_PREFIX = "portqueue-handler"
# How long a stopped worker's idle handler threads get to wind down.
HANDLER_THREAD_JOIN_SECONDS = 2.0


def _finish_worker(code: int, error: str | None = None) -> None:
    """End ``portqueue worker`` with ``code``, even past handlers that never returned.

    A handler that ignores its signal (blocked on a call with no timeout) is
    still running after an abort or a drain past --grace-seconds. Its job was
    released (or its lease will lapse) and a late result is fenced out, but
    the interpreter joins every non-daemon thread at exit: without this, the
    stopped worker would hang until its supervisor SIGKILLs it."""
    if error is not None:
        typer.echo(f"portqueue: error: {error}", err=True)
    deadline = time.monotonic() + HANDLER_THREAD_JOIN_SECONDS
    stuck = []
    for thread in threading.enumerate():
        if thread.name.startswith(HANDLER_THREAD_PREFIX):
            thread.join(max(deadline - time.monotonic(), 0))
            if thread.is_alive():
                stuck.append(thread)
    if stuck:
        logging.getLogger("portqueue.worker").warning(
            "%d handler(s) still running after the worker stopped; exiting without "
            "them (their jobs were released, their late results are refused)", len(stuck))
        atexit._run_exitfuncs()  # the app's exit hooks (flushing telemetry, logs) still run
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    if code:
        raise typer.Exit(code)


def _load_client(target: str) -> PortQueue | AsyncPortQueue:
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        _fail(EXIT_USAGE, f"target must be MODULE:ATTRIBUTE, got {target!r}")
    sys.path.insert(0, os.getcwd())
    try:
        found: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as exc:
        _fail(EXIT_USAGE, f"cannot load {target!r}: {exc}")
    if not isinstance(found, (PortQueue, AsyncPortQueue)):
        _fail(EXIT_USAGE, f"{target!r} is a {type(found).__name__}, not a PortQueue")
    return found

