"""Queues and schedules: ``stats``, ``queues``, ``schedules``, ``pause``, ``resume``,
``remove-queue``."""

from __future__ import annotations

from typing import Annotated

import typer

from portqueue.cli.base import (
    EXIT_FAILURE,
    DsnOption,
    JsonOption,
    SchemaOption,
    app,
    fail,
)
from portqueue.cli.options import LimitOption, OffsetOption, window
from portqueue.cli.output import (
    emit_json,
    json_text,
    new_table,
    print_table,
    seconds_text,
    stdout_console,
    when,
)
from portqueue.cli.session import Session, open_session
from portqueue.types import FOREVER, JobStatus, PauseMode, QueueInfo, QueueStats, Retention
from portqueue.validation import MAX_PAGE

QueueArgument = Annotated[str, typer.Argument(help="The queue.", show_default=False)]
QUEUE_NAMES = {"queue": "QUEUE"}


@app.command("stats")
def stats_command(
    queue: Annotated[str | None, typer.Argument(
        help="One queue (default: every queue).", show_default=False)] = None,
    dsn: DsnOption = None,
    schema: SchemaOption = "portqueue",
    as_json: JsonOption = False,
) -> None:
    """Jobs per status, pause mode and oldest pending wait, per queue.

    Delayed jobs count as pending. Without QUEUE, every queue is shown.

    Examples:

        portqueue stats

        portqueue stats emails --json | jq '.[0].counts.failed'
    """
    with open_session(dsn, schema, names=QUEUE_NAMES) as session:
        names = [queue] if queue is not None else _every_queue(session)
        stats = [session.run(session.pq.get_queue_stats, queue=name) for name in names]
    if as_json:
        emit_json(stats)
        return
    table = new_table("queue", *(status.value for status in JobStatus), "paused",
                      "oldest pending")
    for row in stats:
        table.add_row(row.queue, *(str(row.counts[status]) for status in JobStatus),
                      _paused(row), seconds_text(row.oldest_pending_seconds))
    stdout_console().print(table)


def _every_queue(session: Session) -> list[str]:
    names: list[str] = []
    while True:
        page = session.run(session.pq.get_queues, limit=MAX_PAGE, offset=len(names))
        names += [info.queue for info in page.items]
        if not page.items or len(names) >= page.total:
            return sorted(names)


def _paused(row: QueueStats | QueueInfo) -> str:
    return row.paused.value if row.paused else "-"


@app.command("queues")
def queues_command(
    limit: LimitOption = 50,
    offset: OffsetOption = 0,
    dsn: DsnOption = None,
    schema: SchemaOption = "portqueue",
    as_json: JsonOption = False,
) -> None:
    """List queues (newest first) with their pause mode and default options.

    Examples:

        portqueue queues

        portqueue queues --json | jq '.items[].queue'
    """
    limit, offset = window(limit, offset)
    with open_session(dsn, schema) as session:
        page = session.run(session.pq.get_queues, limit=limit, offset=offset)
    if as_json:
        emit_json(page)
        return
    table = new_table("queue", "paused", "concurrency", "max attempts", "timeout", "lease",
                      "retention", "dead letter", "limits", "created")
    for info in page.items:
        table.add_row(info.queue, _paused(info), _text(info.concurrency),
                      _text(info.retry.max_attempts if info.retry else None),
                      _text(info.timeout_seconds), _text(info.lease_seconds),
                      _retention(info.retention), info.dead_letter_queue or "-",
                      info.limits_text(), when(info.created_at))
    print_table(table, f"{len(page.items)} of {page.total} queue(s)")


def _text(value: object) -> str:
    return "-" if value is None else str(value)


def _retention(retention: Retention) -> str:
    """The queue's retention in a cell: "60s", "completed 60s, failed forever, keep 100 failed"."""
    def age(seconds: int) -> str:
        return "forever" if seconds == FOREVER else f"{seconds}s"

    parts = [] if retention.ttl_seconds is None else [age(retention.ttl_seconds)]
    for outcome, seconds in (("completed", retention.completed_ttl_seconds),
                             ("failed", retention.failed_ttl_seconds)):
        if seconds is not None:
            parts.append(f"{outcome} {age(seconds)}")
    for outcome, keep in (("completed", retention.keep_completed),
                          ("failed", retention.keep_failed)):
        if keep is not None:
            parts.append(f"keep all {outcome}" if keep == FOREVER else f"keep {keep} {outcome}")
    return ", ".join(parts) or "-"


@app.command("schedules")
def schedules_command(
    queue: Annotated[str | None, typer.Option(
        "--queue", help="Only this queue's schedules.", show_default=False)] = None,
    enabled: Annotated[bool | None, typer.Option(
        "--enabled/--disabled", help="Only enabled (or disabled) schedules.",
        show_default=False)] = None,
    limit: LimitOption = 50,
    offset: OffsetOption = 0,
    dsn: DsnOption = None,
    schema: SchemaOption = "portqueue",
    as_json: JsonOption = False,
) -> None:
    """List recurring schedules (newest first): cron or interval, next and last run.

    Examples:

        portqueue schedules --queue reports

        portqueue schedules --json
    """
    limit, offset = window(limit, offset)
    with open_session(dsn, schema, names={"queue": "--queue"}) as session:
        page = session.run(session.pq.get_schedules, queue=queue, enabled=enabled,
                           limit=limit, offset=offset)
    if as_json:
        emit_json(page)
        return
    table = new_table("schedule id", "queue", "cron or every", "tz", "next run", "last run",
                      "enabled", "data")
    for info in page.items:
        every = info.cron if info.cron is not None else f"{info.every_seconds}s"
        table.add_row(info.schedule_id, info.queue, every, info.tz, when(info.next_run_at),
                      when(info.last_run_at), "yes" if info.enabled else "no",
                      json_text(info.data, 40))
    print_table(table, f"{len(page.items)} of {page.total} schedule(s)")


@app.command("pause")
def pause_command(
    queue: QueueArgument,
    mode: Annotated[PauseMode, typer.Option(
        "--mode", help="processing: workers stop claiming, adds are accepted; all: adds "
        "are refused too.")] = PauseMode.PROCESSING,
    dsn: DsnOption = None,
    schema: SchemaOption = "portqueue",
    as_json: JsonOption = False,
) -> None:
    """Pause a queue on every worker (jobs already running finish).

    Examples:

        portqueue pause emails

        portqueue pause emails --mode all
    """
    with open_session(dsn, schema, names=QUEUE_NAMES) as session:
        info = session.run(session.pq.pause_queue, queue=queue, mode=mode)
    if as_json:
        emit_json(info)
        return
    effect = ("workers stop claiming, adds are accepted" if mode is PauseMode.PROCESSING
              else "workers stop claiming, adds are refused")
    typer.echo(f"paused {info.queue!r} ({mode.value}): {effect}")


@app.command("resume")
def resume_command(
    queue: QueueArgument,
    dsn: DsnOption = None,
    schema: SchemaOption = "portqueue",
    as_json: JsonOption = False,
) -> None:
    """Resume a paused queue: workers claim its jobs again, adds are accepted.

    Examples:

        portqueue resume emails

        portqueue resume emails --json
    """
    with open_session(dsn, schema, names=QUEUE_NAMES) as session:
        info = session.run(session.pq.resume_queue, queue=queue)
    if as_json:
        emit_json(info)
        return
    typer.echo(f"resumed {info.queue!r}")


@app.command("remove-queue")
def remove_queue_command(
    queue: QueueArgument,
    dsn: DsnOption = None,
    schema: SchemaOption = "portqueue",
    as_json: JsonOption = False,
) -> None:
    """Remove a queue with no unfinished job: its row, schedules and finished jobs.

    Exits 1, removing nothing, if the queue does not exist or still has pending
    or active jobs (cancel or remove those first).

    Examples:

        portqueue remove-queue emials

        portqueue remove-queue old-reports --json
    """
    with open_session(dsn, schema, names=QUEUE_NAMES) as session:
        removed = session.run(session.pq.remove_queue, queue=queue)
    if as_json:
        emit_json({"queue": queue, "removed": removed})
    elif removed:
        typer.echo(f"removed queue {queue!r}, its schedules and its finished jobs")
    if not removed:
        fail(EXIT_FAILURE, f"no queue {queue!r}")
