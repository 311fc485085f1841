"""``portqueue demo``: a producer and a worker on demo jobs, then what happened."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import psycopg
import typer

from portqueue.cli.base import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    DsnOption,
    app,
    describe,
    fail,
    redact,
    require_dsn,
)
from portqueue.errors import InvalidArgument, PortQueueError
from portqueue.validation import schema_name


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
        "--log-level", help="The worker's log level (INFO shows every state change, and the "
        "demo's deliberate failures, which are never logged as errors).")] = "ERROR",
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

    from portqueue.cli.demo_run import DemoError, demo_logging, run_demo, summary_line
    from portqueue.embedded import EmbeddedUnavailable, default_data_dir, start_embedded

    try:
        schema = schema_name(schema)
    except InvalidArgument as exc:
        fail(EXIT_USAGE, f"{exc} (from --schema)")
    console = Console(highlight=False)
    demo_logging(console, log_level)
    if dsn:
        where = "--dsn database"
        require_dsn(dsn)
    else:
        data_dir = data_dir or default_data_dir("demo")
        console.print(f"no --dsn: starting an embedded PostgreSQL in {data_dir}")
        try:
            dsn = start_embedded(data_dir, stop_at_exit=True)
        except EmbeddedUnavailable as exc:
            fail(EXIT_FAILURE, str(exc))
        except Exception as exc:  # the wheel raises whatever initdb or pg_ctl did
            fail(EXIT_FAILURE, f"the embedded PostgreSQL did not start: {describe(exc)} "
                 f"(its log: {data_dir / 'log'}; delete {data_dir} to start afresh)")
        where = "embedded server"

    from alembic.util import CommandError
    from sqlalchemy.exc import SQLAlchemyError

    try:
        summary = run_demo(dsn=dsn, schema=schema, jobs=jobs, console=console, where=where)
    except KeyboardInterrupt:
        fail(EXIT_INTERRUPTED, "interrupted; unfinished jobs were put back to pending")
    except DemoError as exc:
        fail(EXIT_FAILURE, str(exc))
    except (PortQueueError, psycopg.Error, SQLAlchemyError, CommandError, OSError) as exc:
        fail(EXIT_FAILURE, f"demo failed: {redact(describe(exc), dsn)}")
    problems = summary.unexpected()
    typer.echo(summary_line(summary))
    if problems:
        fail(EXIT_FAILURE, "not every job ended as planned: " + "; ".join(problems))

