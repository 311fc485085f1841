"""How commands print: JSON for scripts, rich tables for people, progress bars on stderr.

JSON is the result dataclasses as objects, field for field (enums as their
values, datetimes as ISO 8601 UTC strings), so a shape only grows when the
dataclass grows. docs/cli.md shows every shape.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from enum import Enum
from typing import Any

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

# Width of tables written to a pipe or file: rich's default (80) would fold
# ids and timestamps over several lines, which is no help to grep.
PIPE_WIDTH = 200


def plain(value: Any) -> Any:
    """``value`` as JSON-ready data: dataclasses to dicts, enums to values, datetimes to ISO."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: plain(getattr(value, field.name))
                for field in dataclasses.fields(value)}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(plain(key)): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value


def emit_json(value: Any) -> None:
    typer.echo(json.dumps(plain(value), ensure_ascii=False))


def stdout_console() -> Console:
    terminal = sys.stdout.isatty()
    # No markup, no emoji: job data such as "[b]" or ":x:" is printed as written.
    return Console(highlight=False, markup=False, emoji=False,
                   width=None if terminal else PIPE_WIDTH)


def new_table(*columns: str, show_header: bool = True) -> Table:
    """A borderless table: columns line up for people and split on spaces for scripts."""
    return Table(*columns, show_header=show_header, show_edge=False, pad_edge=False, box=None,
                 header_style="bold")


def page_footer(offset: int, shown: int, total: int, what: str) -> str:
    """A paged list's footer: which rows of how many, and the ``--offset`` for the next page."""
    span = f"{offset + 1}-{offset + shown}" if shown else "none"
    more = f"; --offset {offset + shown} for more" if offset + shown < total else ""
    return f"{span} of {total} {what}{more}"


def print_table(table: Table, footer: str) -> None:
    """``table`` on stdout, then a one-line ``footer`` (how many rows of how many)."""
    console = stdout_console()
    console.print(table)
    console.print(footer)


def when(moment: datetime | None) -> str:
    """A timestamp for people: UTC, to the second; ``-`` for none."""
    if moment is None:
        return "-"
    return moment.strftime("%Y-%m-%d %H:%M:%SZ")


def cut(text: str, limit: int) -> str:
    """``text`` on one line, at most ``limit`` characters (``job`` shows it whole)."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def json_text(value: Any, limit: int) -> str:
    return cut(json.dumps(value, ensure_ascii=False), limit)


def seconds_text(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}s"


class Bar:
    """A progress bar on stderr; every method is a no-op when bars are off."""

    def __init__(self, progress: Progress | None, description: str) -> None:
        self._progress = progress
        self._task: TaskID | None = None
        if progress is not None:
            self._task = progress.add_task(description, total=None)

    def total(self, total: int | None) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, total=total)

    def advance(self, amount: int) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.advance(self._task, amount)

    def describe(self, description: str) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, description=description)


def bars_wanted(as_json: bool) -> bool:
    """Bars only for a person watching: stderr is a terminal and output is not for a script."""
    return not as_json and sys.stderr.isatty()


@contextmanager
def progress_bar(description: str, *, enabled: bool) -> Iterator[Bar]:
    if not enabled:
        yield Bar(None, description)
        return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True)) as progress:
        yield Bar(progress, description)
