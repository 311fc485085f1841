"""Reading the dashboard's query strings and forms into checked values.

Bad values raise ``InvalidArgument`` naming the parameter; the app turns that
into a 400 page, so a mistyped URL explains itself instead of showing nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from portqueue import parsing, validation
from portqueue.errors import InvalidArgument
from portqueue.types import JobStatus, PauseMode

PAGE_SIZE = 50
MAX_PAGE_NUMBER = 1_000_000


@dataclass(frozen=True)
class Paging:
    """Page ``number`` (from 1) of ``total`` items, ``size`` a page."""

    number: int
    total: int
    size: int = PAGE_SIZE

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.size))

    @property
    def has_previous(self) -> bool:
        return self.number > 1

    @property
    def has_next(self) -> bool:
        return self.number < self.pages


def offset(number: int) -> int:
    """Where page ``number`` starts."""
    return (number - 1) * PAGE_SIZE


def page_number(params: Mapping[str, str]) -> int:
    return parsing.integer("page", params.get("page") or "1", minimum=1,
                           maximum=MAX_PAGE_NUMBER)


def optional(params: Mapping[str, str], name: str) -> str | None:
    """A text parameter; empty means absent (an unfilled filter field)."""
    return params.get(name) or None


def queue(params: Mapping[str, str], name: str = "queue") -> str | None:
    value = optional(params, name)
    return None if value is None else validation.queue_name(value, name)


def status(params: Mapping[str, str]) -> JobStatus | None:
    raw = optional(params, "status")
    if raw is None:
        return None
    try:
        return JobStatus(raw)
    except ValueError:
        choices = ", ".join(s.value for s in JobStatus)
        raise InvalidArgument("status", f"expected one of {choices}") from None


def pause_mode(form: Mapping[str, Any]) -> PauseMode:
    raw = form.get("mode") or PauseMode.PROCESSING.value
    try:
        return PauseMode(raw)
    except ValueError:
        raise InvalidArgument("mode", "expected 'processing' or 'all'") from None


def json_data(text: str) -> Any:
    """The add form's data field, parsed as JSON (see ``parsing.json_value``)."""
    if not text.strip():
        raise InvalidArgument("data", "enter a JSON value, e.g. {} or {\"to\": \"a@b.com\"}")
    return parsing.json_value("data", text)


def priority(text: str) -> int:
    if not text.strip():
        return 0
    return parsing.integer("priority", text, minimum=-validation.INT32_MAX,
                           maximum=validation.INT32_MAX)
