"""``portqueue job`` (one job, every column) and ``portqueue jobs`` (a page of a queue's jobs)."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from portqueue.cli.base import (
    EXIT_FAILURE,
    EXIT_USAGE,
    DsnOption,
    JsonOption,
    SchemaOption,
    app,
    fail,
)
from portqueue.cli.options import (
    GroupOption,
    LimitOption,
    OffsetOption,
    StatusOption,
    job_ids,
    statuses,
    window,
)
from portqueue.cli.output import (
    cut,
    emit_json,
    json_text,
    new_table,
    page_footer,
    print_table,
    stdout_console,
    when,
)
from portqueue.cli.session import open_session
from portqueue.types import JobSnapshot

JobIdArgument = Annotated[str, typer.Argument(help="The job's id (a UUID).", show_default=False)]


@app.command("job")
def job_command(
    job_id: JobIdArgument,
    dsn: DsnOption = None,
    schema: SchemaOption = "portqueue",
    as_json: JsonOption = False,
) -> None:
    """Show one job: status, attempts, data, output, every error. Exits 1 if unknown.

    Examples:

        portqueue job 0193f0a4-8c1e-7b7a-9d6e-3f1c2a4b5d6e

        portqueue job 0193f0a4-8c1e-7b7a-9d6e-3f1c2a4b5d6e --json | jq .errors
    """
    (checked,) = job_ids([job_id])
    with open_session(dsn, schema) as session:
        job = session.run(session.pq.get_job, job_id=checked)
    if job is None:
        fail(EXIT_FAILURE, f"no job {checked}")
    if as_json:
        emit_json(job)
        return
    stdout_console().print(_job_table(job))


def _job_table(job: JobSnapshot) -> Table:
    table = new_table("field", "value", show_header=False)
    rows = {
        "job id": job.job_id, "queue": job.queue, "status": job.status.value,
        "attempt": f"{job.attempt} of {job.max_attempts}", "priority": str(job.priority),
        "created": when(job.created_at), "start after": when(job.start_after),
        "started": when(job.started_at), "finished": when(job.finished_at),
        "expires": when(job.expire_at), "group": job.group_id or "-",
        "idempotency key": job.idempotency_key or "-", "singleton key": job.singleton_key or "-",
        "schedule": job.schedule_id or "-", "source job": job.source_job_id or "-",
        "cancel requested": "yes" if job.cancel_requested else "no",
        "progress": "-" if job.progress is None else f"{job.progress:.0%}",
        "attrs": json.dumps(job.attrs, ensure_ascii=False),
        "data": json.dumps(job.data, ensure_ascii=False),
        "output": json.dumps(job.output, ensure_ascii=False),
    }
    for name, value in rows.items():
        table.add_row(name, value)
    for error in job.errors:
        table.add_row(f"error (attempt {error.get('attempt', '?')})",
                      f"{error.get('type', '?')}: {error.get('message', '')}")
    return table


@app.command("jobs")
def jobs_command(
    queue: Annotated[str | None, typer.Argument(help="The queue (or --queue).",
                                                show_default=False)] = None,
    queue_option: Annotated[str | None, typer.Option(
        "--queue", help="The queue, as an option (as retry, cancel and remove take it).",
        show_default=False)] = None,
    status: StatusOption = None,
    group_id: GroupOption = None,
    limit: LimitOption = 20,
    offset: OffsetOption = 0,
    dsn: DsnOption = None,
    schema: SchemaOption = "portqueue",
    as_json: JsonOption = False,
) -> None:
    """List a queue's jobs, newest first, a page at a time.

    Examples:

        portqueue jobs emails --status failed

        portqueue jobs --queue emails --status pending,active --limit 100 --offset 100 --json
    """
    if (queue is None) == (queue_option is None):
        fail(EXIT_USAGE, "QUEUE: pass the queue once, as an argument or with --queue")
    queue = queue if queue is not None else queue_option
    wanted = statuses(status)
    limit, offset = window(limit, offset)
    with open_session(dsn, schema, names={"queue": "QUEUE", "group_id": "--group-id"}) as session:
        page = session.run(session.pq.get_jobs, queue=queue, statuses=wanted,
                           group_id=group_id, limit=limit, offset=offset)
    if as_json:
        emit_json(page)
        return
    table = new_table("job id", "status", "attempt", "priority", "created", "finished",
                      "data", "last error")
    for job in page.items:
        last = job.errors[-1] if job.errors else None
        table.add_row(job.job_id, job.status.value, f"{job.attempt}/{job.max_attempts}",
                      str(job.priority), when(job.created_at), when(job.finished_at),
                      json_text(job.data, 40),
                      "-" if last is None else cut(str(last.get("message", "")), 60))
    print_table(table, page_footer(offset, len(page.items), page.total,
                                   f"job(s) in {queue!r}"))
