"""The ``portqueue`` command line.

One Typer app; each command is a function registered on ``app`` (``migrate``,
``worker`` and ``demo`` today, the operator commands later). Exit codes follow the
usual convention: 0 success, 1 the operation failed (the database refused or
was unreachable), 2 a usage error (a missing DSN, a bad schema name).

Connection strings carry passwords, and they end up in CI logs: every message
this module prints about a connection goes through :func:`redact` first.
"""

from __future__ import annotations

import asyncio
import atexit
import importlib
import json
import logging
import os
import re
import sys
import threading
import time
from pathlib import Path
from typing import Annotated, Any, NoReturn
from urllib.parse import unquote

import psycopg
import typer
from psycopg.conninfo import conninfo_to_dict

from portqueue.async_client import AsyncPortQueue
from portqueue.client import PortQueue
from portqueue.errors import InvalidArgument, PortQueueError
from portqueue.migrate import head_revision, migrate, migration_sql
from portqueue.validation import schema_name

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

app = typer.Typer(
    name="portqueue",
    no_args_is_help=True,
    add_completion=False,
    # Locals of a failing frame include the DSN, password and all.
    pretty_exceptions_show_locals=False,
)

DsnOption = Annotated[
    str | None,
    typer.Option(
        "--dsn",
        envvar="PORTQUEUE_DSN",
        help="PostgreSQL connection string (URL or key=value).",
        show_default=False,
    ),
]
SchemaOption = Annotated[
    str,
    typer.Option(
        "--schema",
        envvar="PORTQUEUE_SCHEMA",
        help="The schema holding portqueue's tables.",
    ),
]


@app.callback()
def _root() -> None:
    """portqueue: a PostgreSQL-native, transactional job queue.

    Settings come from options or the environment (PORTQUEUE_DSN,
    PORTQUEUE_SCHEMA). `portqueue demo` shows it working. Run
    `portqueue COMMAND --help` for a command's options.

    Example:

        PORTQUEUE_DSN=postgresql://app@db.internal/app portqueue migrate
    """


@app.command("migrate")
def migrate_command(
    dsn: DsnOption = None,
    schema: SchemaOption = "portqueue",
    sql: Annotated[
        bool,
        typer.Option(
            "--sql",
            help="Print the SQL for an empty database instead of running it; "
            "never connects, so no DSN is needed.",
        ),
    ] = False,
) -> None:
    """Create or upgrade portqueue's schema to the latest revision.

    Safe to run from many processes at once (deploys): they serialise on an
    advisory lock, and a schema already at the latest revision is left as is.

    Examples:

        portqueue migrate --dsn postgresql://app@db.internal/app

        PORTQUEUE_DSN=postgresql://app@db/app portqueue migrate --schema jobs

        portqueue migrate --sql > portqueue-schema.sql
    """
    try:
        schema = schema_name(schema)
    except InvalidArgument as exc:
        _fail(EXIT_USAGE, f"{exc} (from --schema or PORTQUEUE_SCHEMA)")

    if sql:
        sys.stdout.write(migration_sql(schema=schema))
        return

    if not dsn:
        _fail(EXIT_USAGE, "no database given: pass --dsn or set PORTQUEUE_DSN")
    try:
        conninfo_to_dict(dsn)
    except psycopg.Error as exc:
        _fail(EXIT_USAGE, f"dsn: not a valid connection string: {redact(str(exc), dsn)}")

    # Here, not at the top: other commands need not pay for importing them.
    from alembic.util import CommandError
    from sqlalchemy.exc import SQLAlchemyError

    try:
        migrate(dsn, schema=schema)
    except (psycopg.Error, SQLAlchemyError, CommandError) as exc:
        _fail(EXIT_FAILURE, f"migration failed: {redact(_describe(exc), dsn)}")
    typer.echo(f"portqueue: schema {schema!r} is at revision {head_revision()} (head)")


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
    scheduler: Annotated[bool, typer.Option(
        "--scheduler/--no-scheduler", help="Run the scheduler in this process.")] = True,
    maintenance: Annotated[bool, typer.Option(
        "--maintenance/--no-maintenance",
        help="Run maintenance (lease rescue) in this process.")] = True,
    log_level: Annotated[str, typer.Option("--log-level", help="Logging level.")] = "INFO",
) -> None:
    """Run a managed worker for the handlers registered on your client.

    SIGTERM stops claiming, waits for running jobs (up to --grace-seconds) and
    exits 0; a second signal, or SIGINT, aborts: every handler's signal is set
    and unfinished jobs go back to pending at once, without spending an attempt.
    Exits 1 on a fatal error, 2 on a usage error.

    Examples:

        portqueue worker myapp.jobs:pq

        portqueue worker myapp.jobs:pq --queues emails,reports --concurrency 20
    """
    logging.basicConfig(level=log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    client = _load_client(target)
    effective_dsn = dsn or client._settings.dsn
    try:
        client = client._reconfigured(dsn=dsn, schema=schema, instance_key=instance_key)
        options: dict[str, Any] = {
            "queues": None if queues is None else [q.strip() for q in queues.split(",") if q],
            "concurrency": concurrency, "scheduler": scheduler, "maintenance": maintenance,
            "poll_interval": poll_interval, "grace_seconds": grace_seconds,
        }
        if isinstance(client, AsyncPortQueue):
            asyncio.run(client.run(**options))
        else:
            client.run(**options)
    except InvalidArgument as exc:
        _fail(EXIT_USAGE, redact(str(exc), effective_dsn))
    except (PortQueueError, psycopg.Error, OSError) as exc:
        _finish_worker(EXIT_FAILURE, f"worker failed: {redact(_describe(exc), effective_dsn)}")
    _finish_worker(0)


# Threads running sync handlers carry this name prefix (portqueue.worker.runtime).
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


@app.command("prune")
def prune_command(
    dsn: DsnOption = None,
    schema: SchemaOption = "portqueue",
    retention_seconds: Annotated[int, typer.Option(
        "--default-retention-seconds",
        help="Retention of finished jobs whose job and queue set none; match your "
        "clients' default_retention_seconds.")] = 7 * 24 * 3600,
    as_json: Annotated[bool, typer.Option("--json", help="Print the counts as JSON.")] = False,
) -> None:
    """Run one maintenance pass now and print what it did.

    Rescues lapsed leases, expires jobs past expire_at, prunes finished jobs
    past their retention (by age and by count) and forgets dead workers, in
    bounded batches. A service another process is running at this moment is
    skipped (it reports 0). Workers run the same services on their own; this
    command is for cron jobs, one-off clean-ups and databases with no workers.

    Examples:

        portqueue prune --dsn postgresql://app@db.internal/app

        portqueue prune --json
    """
    from portqueue.maintenance import run_pass

    if not dsn:
        _fail(EXIT_USAGE, "no database given: pass --dsn or set PORTQUEUE_DSN")
    try:
        schema = schema_name(schema)
        counts = run_pass(dsn, schema=schema, default_retention_seconds=retention_seconds)
    except InvalidArgument as exc:
        _fail(EXIT_USAGE, str(exc))
    except psycopg.Error as exc:
        _fail(EXIT_FAILURE, f"prune failed: {redact(_describe(exc), dsn)}")
    if as_json:
        typer.echo(json.dumps(counts))
        return
    labels = {"rescuer": "lapsed leases rescued", "expirer": "jobs expired",
              "pruner": "finished jobs pruned", "reaper": "dead workers forgotten"}
    for service, count in counts.items():
        typer.echo(f"{labels.get(service, service)}: {count}")


@app.command("demo")
def demo_command(
    dsn: DsnOption = None,
    jobs: Annotated[int, typer.Option(
        "--jobs", min=10, max=20_000, help="How many demo jobs to add.")] = 300,
    schema: Annotated[str, typer.Option(
        "--schema",
        help="The demo's schema, dropped and recreated on every run (never taken from "
        "PORTQUEUE_SCHEMA, and never a schema the demo did not create).")] = "portqueue_demo",
    log_level: Annotated[str, typer.Option(
        "--log-level", help="The worker's log level (INFO shows every state change).")] = "ERROR",
    data_dir: Annotated[Path | None, typer.Option(
        "--data-dir", help="Without --dsn: the embedded PostgreSQL's data directory "
        "(default: <temp dir>/portqueue-demo-pg-<uid>, kept between runs).",
        show_default=False)] = None,
) -> None:
    """Run a producer and a worker on demo jobs, then print what happened.

    With --dsn (or PORTQUEUE_DSN) it uses that database; without, it starts an
    embedded PostgreSQL (the `embedded` extra; its data is kept in the temp
    directory between runs) and stops it at exit. Most jobs succeed, some fail
    once and are retried, a few fail for good and land in a dead-letter queue,
    one is delayed and one is cancelled while it runs. Ends with counts per
    status, throughput and commit-to-start latency. Exits 0 when every job
    ended as planned.

    Examples:

        portqueue demo

        portqueue demo --dsn postgresql://app@db.internal/app --jobs 1000
    """
    # Here, not at the top: rich and the demo are for this command only.
    from rich.console import Console

    from portqueue.demo import DemoError, demo_logging, run_demo, summary_line
    from portqueue.embedded import EmbeddedUnavailable, default_data_dir, start_embedded

    try:
        schema = schema_name(schema)
    except InvalidArgument as exc:
        _fail(EXIT_USAGE, f"{exc} (from --schema)")
    console = Console(highlight=False)
    demo_logging(console, log_level)
    if dsn:
        where = "--dsn database"
        try:
            conninfo_to_dict(dsn)
        except psycopg.Error as exc:
            _fail(EXIT_USAGE, f"dsn: not a valid connection string: {redact(str(exc), dsn)}")
    else:
        data_dir = data_dir or default_data_dir("demo")
        console.print(f"no --dsn: starting an embedded PostgreSQL in {data_dir}")
        try:
            dsn = start_embedded(data_dir, stop_at_exit=True)
        except EmbeddedUnavailable as exc:
            _fail(EXIT_FAILURE, str(exc))
        except Exception as exc:  # the wheel raises whatever initdb or pg_ctl did
            _fail(EXIT_FAILURE, f"the embedded PostgreSQL did not start: {_describe(exc)} "
                  f"(its log: {data_dir / 'log'}; delete {data_dir} to start afresh)")
        where = "embedded server"

    from alembic.util import CommandError
    from sqlalchemy.exc import SQLAlchemyError

    try:
        summary = run_demo(dsn=dsn, schema=schema, jobs=jobs, console=console, where=where)
    except KeyboardInterrupt:
        _fail(EXIT_INTERRUPTED, "interrupted; unfinished jobs were put back to pending")
    except DemoError as exc:
        _fail(EXIT_FAILURE, str(exc))
    except (PortQueueError, psycopg.Error, SQLAlchemyError, CommandError, OSError) as exc:
        _fail(EXIT_FAILURE, f"demo failed: {redact(_describe(exc), dsn)}")
    problems = summary.unexpected()
    typer.echo(summary_line(summary))
    if problems:
        _fail(EXIT_FAILURE, "not every job ended as planned: " + "; ".join(problems))


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


def _describe(exc: BaseException) -> str:
    # SQLAlchemy wraps the driver's error in "(psycopg.X) ... (Background on
    # this error at: …)"; the driver's own message is the useful part.
    orig = getattr(exc, "orig", None)  # sqlalchemy.exc.DBAPIError
    if isinstance(orig, BaseException):
        exc = orig
    message = str(exc).strip() or type(exc).__name__
    return f"{type(exc).__name__}: {message}"


def _passwords(dsn: str) -> set[str]:
    """Every spelling of a password the DSN may carry, even an unparsable DSN."""
    found: set[str] = set()
    try:
        password = conninfo_to_dict(dsn).get("password")
        if password:
            found.add(str(password))
    except psycopg.Error:
        pass
    # URL userinfo (scheme://user:password@host) and password=… in either
    # form, as written: libpq messages quote the DSN's own text.
    for pattern in (r"^[A-Za-z][\w+.-]*://[^/?#@]*?:([^/?#@]*)@", r"password\s*=\s*([^\s&]+)"):
        for match in re.finditer(pattern, dsn):
            raw = match.group(1).strip("'")
            found.update({raw, unquote(raw)})
    return {password for password in found if password}


def redact(message: str, dsn: str) -> str:
    """``message`` with any password from ``dsn`` replaced by ``***``."""
    for password in sorted(_passwords(dsn), key=len, reverse=True):
        message = message.replace(password, "***")
    return message


def _fail(code: int, message: str) -> NoReturn:
    typer.echo(f"portqueue: error: {message}", err=True)
    raise typer.Exit(code)


def main() -> None:
    """The ``portqueue`` console script."""
    app(prog_name="portqueue")


if __name__ == "__main__":
    main()
