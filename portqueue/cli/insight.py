"""Across queues: ``workers`` (the live worker processes) and ``failures``."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from portqueue import insight
from portqueue.cli.base import DsnOption, JsonOption, SchemaOption, app
from portqueue.cli.options import LimitOption, OffsetOption, window
from portqueue.cli.output import (
    cut,
    emit_json,
    new_table,
    page_footer,
    plain,
    print_table,
    when,
)
from portqueue.cli.session import Session, open_session
from portqueue.types import Page


def _read(session: Session, reader: insight.Reader[Any], **arguments: Any) -> Any:
    return session.run(lambda tx, **given: insight.read_sync(session.pq, reader, tx, **given),
                       **arguments)


@app.command("workers")
def workers_command(
    limit: LimitOption = 20,
    offset: OffsetOption = 0,
    dsn: DsnOption = None,
    schema: SchemaOption = "portqueue",
    as_json: JsonOption = False,
) -> None:
    """List the registered worker processes: host, pid, queues, running jobs, last seen.

    Examples:

        portqueue workers

        portqueue workers --json | jq '.items[] | {hostname, pid, running}'
    """
    limit, offset = window(limit, offset)
    with open_session(dsn, schema) as session:
        page: Page[insight.WorkerInfo] = _read(session, insight.workers, limit=limit,
                                               offset=offset)
    if as_json:
        emit_json(page)
        return
    table = new_table("host", "pid", "queues", "concurrency", "running", "last seen",
                      "started", "instance key")
    for worker in page.items:
        table.add_row(worker.hostname, str(worker.pid), ",".join(worker.queues) or "-",
                      str(worker.concurrency), str(worker.running),
                      f"{worker.seen_seconds_ago:.0f}s ago", when(worker.started_at),
                      worker.instance_key or "-")
    print_table(table, page_footer(offset, len(page.items), page.total, "worker(s)"))


@app.command("failures")
def failures_command(
    queue: Annotated[str | None, typer.Option(
        "--queue", help="Only this queue (default: every queue).", show_default=False)] = None,
    limit: LimitOption = 20,
    offset: OffsetOption = 0,
    dsn: DsnOption = None,
    schema: SchemaOption = "portqueue",
    as_json: JsonOption = False,
) -> None:
    """List failed jobs across queues, newest failure first, with the error message.

    Examples:

        portqueue failures

        portqueue failures --queue emails --json | jq -r '.items[].error'
    """
    limit, offset = window(limit, offset)
    with open_session(dsn, schema, names={"queue": "--queue"}) as session:
        page: Page[insight.Failure] = _read(session, insight.failures, queue=queue,
                                            limit=limit, offset=offset)
    if as_json:
        emit_json({"items": [{**plain(failure.job), "error": failure.error}
                             for failure in page.items], "total": page.total})
        return
    table = new_table("failed at", "queue", "job id", "attempt", "error")
    for failure in page.items:
        job = failure.job
        kind = f"{failure.error_type}: " if failure.error_type else ""
        table.add_row(when(job.finished_at), job.queue, job.job_id,
                      f"{job.attempt}/{job.max_attempts}",
                      cut(kind + (failure.error or "-"), 80))
    print_table(table, page_footer(offset, len(page.items), page.total, "failed job(s)"))
