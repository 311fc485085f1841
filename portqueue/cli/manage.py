"""``retry``, ``cancel`` and ``remove``: by job id, or every job matching a filter.

By id, a command exits 1 when any id was not acted on (unknown, or in a
state that forbids it). By filter (``--queue`` with ``--status``, optionally
``--group-id``), it works through the matching jobs a page at a time, one
transaction per page, with a progress bar: a million failed jobs never
become one long transaction holding a million row locks. It stops after as
many jobs as matched when it began, so jobs added meanwhile cannot keep it
running forever.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated

import typer

from portqueue.cli.base import (
    EXIT_FAILURE,
    EXIT_USAGE,
    DsnOption,
    JsonOption,
    SchemaOption,
    app,
    fail,
)
from portqueue.cli.options import GroupOption, StatusOption, job_ids, statuses
from portqueue.cli.output import Bar, bars_wanted, emit_json, progress_bar
from portqueue.cli.session import Session, open_session
from portqueue.types import FINISHED_STATUSES, CancelOutcome, JobStatus
from portqueue.validation import MAX_PAGE

IdsArgument = Annotated[list[str] | None, typer.Argument(
    help="Job ids (UUIDs); or use --queue with --status.", show_default=False)]
QueueFilter = Annotated[str | None, typer.Option(
    "--queue", help="With --status: act on this queue's matching jobs.", show_default=False)]
FILTER_NAMES = {"queue": "--queue", "group_id": "--group-id", "statuses": "--status"}


@dataclass(frozen=True)
class Filter:
    """The jobs a filter command acts on."""

    queue: str
    statuses: list[JobStatus]
    group_id: str | None


def _target(ids: list[str] | None, queue: str | None, status: list[str] | None,
            group_id: str | None, allowed: Sequence[JobStatus]) -> list[str] | Filter:
    """The ids, or the filter, checked before connecting (bad input writes nothing)."""
    if ids:
        if queue is not None or status or group_id is not None:
            fail(EXIT_USAGE, "job ids and --queue/--status/--group-id: pass one or the other")
        return job_ids(ids)
    if queue is None or not status:
        fail(EXIT_USAGE, "pass job ids, or --queue with --status")
    return Filter(queue, statuses(status, allowed=allowed) or [], group_id)


def for_each_page(session: Session, where: Filter, bar: Bar,
                  act: Callable[[list[str]], int]) -> tuple[int, int]:
    """``act(ids)`` on pages of matching jobs; it returns how many of them stopped
    matching (removed, retried, cancelled), which decides the next page's offset.
    Returns how many jobs matched when it began, and how many stopped matching."""
    offset = done = gone = 0
    matched: int | None = None
    while matched is None or done < matched:
        page = session.run(session.pq.get_jobs, queue=where.queue, statuses=where.statuses,
                           group_id=where.group_id, limit=MAX_PAGE, offset=offset)
        if matched is None:
            matched = page.total
            bar.total(matched)
        ids = [job.job_id for job in page.items][: matched - done]
        if not ids:
            break
        acted = act(ids)
        gone += acted
        offset += len(ids) - acted
        done += len(ids)
        bar.advance(len(ids))
    return matched or 0, gone


def _act_on_matching(session: Session, where: Filter, label: str, as_json: bool,
                     act: Callable[[list[str]], int]) -> tuple[int, int]:
    """``for_each_page`` behind a progress bar labelled ``label`` (see ``bars_wanted``)."""
    with progress_bar(label, enabled=bars_wanted(as_json)) as bar:
        return for_each_page(session, where, bar, act)


def _act_and_report(session: Session, where: Filter, verbs: tuple[str, str], as_json: bool,
                    act: Callable[[list[str]], int]) -> None:
    """``_act_on_matching`` with ``verbs`` (``("removing", "removed")``), then the count
    that stopped matching, as ``{"matched": …, "removed": …}`` for --json."""
    doing, done = verbs
    matched, acted = _act_on_matching(session, where, doing, as_json, act)
    _report({"matched": matched, done: acted}, as_json,
            f"{done} {acted} of {matched} matching job(s)")


@app.command("retry")
def retry_command(
    ids: IdsArgument = None,
    queue: QueueFilter = None,
    status: StatusOption = None,
    group_id: GroupOption = None,
    dsn: DsnOption = None,
    schema: SchemaOption = "portqueue",
    as_json: JsonOption = False,
) -> None:
    """Put finished jobs back to pending, on their own rows (active ones are skipped).

    By id it exits 1 if any job was unknown or active.

    Examples:

        portqueue retry 0193f0a4-8c1e-7b7a-9d6e-3f1c2a4b5d6e

        portqueue retry --queue emails --status failed
    """
    target = _target(ids, queue, status, group_id, sorted(FINISHED_STATUSES))
    with open_session(dsn, schema, names=FILTER_NAMES) as session:
        if isinstance(target, Filter):
            def act(page: list[str]) -> int:
                # One statement per page (retry_jobs), in a transaction of its own.
                return session.run(session.pq.retry_jobs, job_ids=page)

            _act_and_report(session, target, ("retrying", "retried"), as_json, act)
            return
        results = {job_id: session.run(session.pq.retry_job, job_id=job_id) for job_id in target}
    rows = [{"job_id": job_id, "retried": result is not None,
             "status": result.status.value if result and result.status else None}
            for job_id, result in results.items()]
    if as_json:
        emit_json(rows)
    else:
        for row in rows:
            typer.echo(f"{row['job_id']}: " + (f"retried ({row['status']})" if row["retried"]
                                               else "not retried (unknown or active)"))
    if not all(row["retried"] for row in rows):
        raise typer.Exit(EXIT_FAILURE)


@app.command("cancel")
def cancel_command(
    ids: IdsArgument = None,
    queue: QueueFilter = None,
    status: StatusOption = None,
    group_id: GroupOption = None,
    dsn: DsnOption = None,
    schema: SchemaOption = "portqueue",
    as_json: JsonOption = False,
) -> None:
    """Cancel pending jobs; signal running ones to stop.

    A signalled job ends cancelled when its handler returns. By id it exits 1
    if any job was unknown or already finished.

    Examples:

        portqueue cancel 0193f0a4-8c1e-7b7a-9d6e-3f1c2a4b5d6e

        portqueue cancel --queue reindex --status pending,active
    """
    target = _target(ids, queue, status, group_id, [JobStatus.PENDING, JobStatus.ACTIVE])
    with open_session(dsn, schema, names=FILTER_NAMES) as session:
        if isinstance(target, Filter):
            outcomes = Counter({outcome.value: 0 for outcome in CancelOutcome})

            def act(page: list[str]) -> int:
                # One statement per page (cancel_jobs), in a transaction of its own.
                counts = session.run(session.pq.cancel_jobs, job_ids=page)
                outcomes.update({outcome.value: getattr(counts, outcome.value)
                                 for outcome in CancelOutcome})
                # A signalled job stays active: still matching if active was asked for.
                return counts.cancelled

            matched, _ = _act_on_matching(session, target, "cancelling", as_json, act)
            summary = ", ".join(f"{count} {name}" for name, count in outcomes.items())
            _report({"matched": matched, "outcomes": dict(outcomes)}, as_json,
                    f"{matched} matching job(s): {summary}")
            return
        results = [session.run(session.pq.cancel_job, job_id=job_id) for job_id in target]
    if as_json:
        emit_json(results)
    else:
        for result in results:
            typer.echo(f"{result.job_id}: {result.outcome.value.replace('_', ' ')}")
    acted = {CancelOutcome.CANCELLED, CancelOutcome.SIGNALLED}
    if not all(result.outcome in acted for result in results):
        raise typer.Exit(EXIT_FAILURE)


@app.command("remove")
def remove_command(
    ids: IdsArgument = None,
    queue: QueueFilter = None,
    status: StatusOption = None,
    group_id: GroupOption = None,
    dsn: DsnOption = None,
    schema: SchemaOption = "portqueue",
    as_json: JsonOption = False,
) -> None:
    """Delete jobs for good; an active job is never removed (cancel it first).

    By id it exits 1 if any job was unknown or active.

    Examples:

        portqueue remove 0193f0a4-8c1e-7b7a-9d6e-3f1c2a4b5d6e

        portqueue remove --queue emails --status completed,cancelled
    """
    removable = [status for status in JobStatus if status is not JobStatus.ACTIVE]
    target = _target(ids, queue, status, group_id, removable)
    with open_session(dsn, schema, names=FILTER_NAMES) as session:
        if isinstance(target, Filter):
            def remove(page: list[str]) -> int:
                return session.run(session.pq.remove_jobs, job_ids=page)

            _act_and_report(session, target, ("removing", "removed"), as_json, remove)
            return
        count = session.run(session.pq.remove_jobs, job_ids=target)
    _report({"matched": len(target), "removed": count}, as_json,
            f"removed {count} of {len(target)} job(s)"
            + ("" if count == len(target) else " (the others are unknown or active)"))
    if count < len(target):
        raise typer.Exit(EXIT_FAILURE)


def _report(summary: dict[str, object], as_json: bool, text: str) -> None:
    if as_json:
        emit_json(summary)
    else:
        typer.echo(text)
