"""docs/consuming.md's option tables match the code's signatures (STYLE 11)."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from portqueue import AsyncPortQueue, PortQueue

CONSUMING = Path(__file__).resolve().parents[2] / "docs" / "consuming.md"
_ROW_RE = re.compile(r"^\| `(\w+)` \| `?([^|`]+?)`? \|", re.MULTILINE)


def documented(heading: str) -> dict[str, str]:
    """The first table after ``heading``: option name -> documented default."""
    text = CONSUMING.read_text(encoding="utf-8")
    section = text[text.index(heading):]
    table = section[section.index("\n| ") + 1:]
    table = table[:table.index("\n\n")]
    return dict(_ROW_RE.findall(table))


def defaults(function: Callable[..., Any]) -> dict[str, str]:
    return {
        name: "required" if p.default is inspect.Parameter.empty else repr(p.default)
        for name, p in inspect.signature(function).parameters.items() if name != "self"}


@pytest.mark.parametrize("client", [PortQueue, AsyncPortQueue])
def test_create_queue_table(client: type[Any]) -> None:
    assert documented("## Declaring a queue") == defaults(client.create_queue)


@pytest.mark.parametrize("client", [PortQueue, AsyncPortQueue])
def test_start_table(client: type[Any]) -> None:
    assert documented("### In your process") == defaults(client.start)
    assert defaults(client.run) == defaults(client.start)
