"""The schema's life: ``migrate`` (create or upgrade it) and ``prune`` (one maintenance pass)."""

from __future__ import annotations

import sys
from typing import Annotated

import psycopg
import typer

from portqueue.cli.base import (
    EXIT_FAILURE,
    EXIT_USAGE,
    DsnOption,
    JsonOption,
    SchemaOption,
    app,
    checked_schema,
    describe,
    fail,
    redact,
    require_dsn,
)
from portqueue.cli.output import bars_wanted, emit_json, progress_bar
from portqueue.cli.session import check_connection
from portqueue.errors import InvalidArgument
from portqueue.migrate import head_revision, migrate, migration_sql

# What each maintenance service did, for people (``prune --json`` keeps the keys).
SERVICE_RESULTS = {"rescuer": "lapsed leases rescued", "expirer": "jobs expired",
                   "pruner": "finished jobs pruned", "reaper": "dead workers forgotten",
                   "throttles": "ended throttle windows forgotten"}
SERVICE_STEPS = {"rescuer": "rescuing lapsed leases", "expirer": "expiring jobs",
                 "pruner": "pruning finished jobs", "reaper": "forgetting dead workers",
                 "throttles": "forgetting ended throttle windows"}


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
    schema = checked_schema(schema)

    if sql:
        sys.stdout.write(migration_sql(schema=schema))
        return

    dsn = require_dsn(dsn)

    # Here, not at the top: other commands need not pay for importing them.
    from alembic.util import CommandError
    from sqlalchemy.exc import SQLAlchemyError

    try:
        migrate(dsn, schema=schema)
    except (psycopg.Error, SQLAlchemyError, CommandError) as exc:
        fail(EXIT_FAILURE, f"migration failed: {redact(describe(exc), dsn)}")
    typer.echo(f"portqueue: schema {schema!r} is at revision {head_revision()} (head)")


@app.command("prune")
def prune_command(
    dsn: DsnOption = None,
    schema: SchemaOption = "portqueue",
    retention_seconds: Annotated[int, typer.Option(
        "--default-retention-seconds", min=0,
        help="Retention of finished jobs whose job and queue set none; match your "
        "clients' default_retention_seconds.")] = 7 * 24 * 3600,
    completed_seconds: Annotated[int | None, typer.Option(
        "--default-completed-retention-seconds", min=0, show_default=False,
        help="Retention of completed jobs whose job and queue set none; match your "
        "clients' default_retention completed_ttl_seconds.")] = None,
    failed_seconds: Annotated[int | None, typer.Option(
        "--default-failed-retention-seconds", min=0, show_default=False,
        help="The same for failed, cancelled and expired jobs (failed_ttl_seconds).")] = None,
    keep_completed: Annotated[int | None, typer.Option(
        "--default-keep-completed", min=0, show_default=False,
        help="Keep at most N completed jobs in each queue that sets no cap.")] = None,
    keep_failed: Annotated[int | None, typer.Option(
        "--default-keep-failed", min=0, show_default=False,
        help="Keep at most N failed jobs in each queue that sets no cap.")] = None,
    as_json: JsonOption = False,
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

    dsn = require_dsn(dsn)
    schema = checked_schema(schema)
    check_connection(dsn)
    with progress_bar("maintenance", enabled=bars_wanted(as_json)) as bar:
        bar.total(len(SERVICE_STEPS))

        started: list[str] = []

        def on_service(name: str) -> None:
            if started:  # the previous service is done
                bar.advance(1)
            started.append(name)
            bar.describe(SERVICE_STEPS.get(name, name))

        try:
            counts = run_pass(dsn, schema=schema, default_retention_seconds=retention_seconds,
                              on_service=on_service, default_retention={
                                  "completed_ttl_seconds": completed_seconds,
                                  "failed_ttl_seconds": failed_seconds,
                                  "keep_completed": keep_completed, "keep_failed": keep_failed})
        except InvalidArgument as exc:
            fail(EXIT_USAGE, str(exc))
        except psycopg.Error as exc:
            fail(EXIT_FAILURE, f"prune failed: {redact(describe(exc), dsn)}")
        bar.advance(1)
    if as_json:
        emit_json(counts)
        return
    for service, count in counts.items():
        typer.echo(f"{SERVICE_RESULTS.get(service, service)}: {count}")
