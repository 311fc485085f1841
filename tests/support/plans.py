"""Reading an EXPLAIN (FORMAT JSON) plan."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def plan_nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """``plan`` and every node below it, depth first."""
    yield plan
    for child in plan.get("Plans", []):
        yield from plan_nodes(child)
