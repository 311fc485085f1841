"""Options several commands share, and their checks (run before connecting:
bad input is exit 2 and writes nothing)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

import typer

from portqueue import parsing, validation
from portqueue.cli.base import EXIT_USAGE, fail
from portqueue.errors import InvalidArgument
from portqueue.types import JobStatus

STATUS_NAMES = ", ".join(status.value for status in JobStatus)

StatusOption = Annotated[
    list[str] | None,
    typer.Option("--status", help=f"Job status ({STATUS_NAMES}); repeat or comma-separate "
                 "for several.", show_default=False),
]
GroupOption = Annotated[
    str | None, typer.Option("--group-id", help="Only jobs of this group.", show_default=False)
]
LimitOption = Annotated[
    int, typer.Option("--limit", help=f"Rows per page (1-{validation.MAX_PAGE}).")
]
OffsetOption = Annotated[int, typer.Option("--offset", help="Rows to skip (newest first).")]


def statuses(values: Sequence[str] | None, *, allowed: Sequence[JobStatus] = tuple(JobStatus),
             ) -> list[JobStatus] | None:
    """``--status`` values (repeated or comma-separated); ``None`` when not given."""
    if not values:
        return None
    found: list[JobStatus] = []
    for value in (part.strip() for item in values for part in item.split(",")):
        try:
            status = JobStatus(value.lower())
        except ValueError:
            fail(EXIT_USAGE, f"--status: unknown status {value!r} (one of {STATUS_NAMES})")
        if status not in allowed:
            names = ", ".join(s.value for s in allowed)
            fail(EXIT_USAGE, f"--status: {status.value!r} is not allowed here (one of {names})")
        if status not in found:
            found.append(status)
    return found


def job_ids(values: Sequence[str], argument: str = "JOB_ID") -> list[str]:
    """Every id checked before anything runs, so one bad id writes nothing."""
    checked: list[str] = []
    for value in values:
        try:
            job_id = validation.job_id(value, argument)
        except InvalidArgument as exc:
            fail(EXIT_USAGE, str(exc))
        if job_id not in checked:
            checked.append(job_id)
    return checked


def window(limit: int, offset: int) -> tuple[int, int]:
    try:
        return validation.window(limit, offset)
    except InvalidArgument as exc:
        fail(EXIT_USAGE, f"--{exc}")


def json_value(text: str, argument: str) -> Any:
    try:
        return parsing.json_value(argument, text)
    except InvalidArgument as exc:
        fail(EXIT_USAGE, str(exc))
