"""A flow's dependency order costs work in proportion to its jobs and edges.

``add_flow`` of a 5,000-job chain took ~20 s: the order was found level by
level, each level scanning every job left (a chain has as many levels as
jobs). The work is counted here as the calls ``_order`` makes (Python and
built-in), never timed: doubling a chain must about double them.
"""

from __future__ import annotations

import sys
from types import FrameType
from typing import Any, cast

import pytest

from portqueue.errors import InvalidArgument
from portqueue.flows import Node, _order
from portqueue.validation import JobSpec


def node(index: int, internal: list[int]) -> Node:
    return Node(f"jobs[{index}]", "q", cast(JobSpec, None), [], internal, False, key=f"k{index}")


def chain(n: int) -> list[Node]:
    return [node(0, [])] + [node(i, [i - 1]) for i in range(1, n)]


def calls_made(nodes: list[Node]) -> int:
    count = 0

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        nonlocal count
        if event in ("call", "c_call"):
            count += 1

    sys.setprofile(profile)
    try:
        _order(nodes)
    finally:
        sys.setprofile(None)
    return count


def test_a_chain_is_ordered_in_linear_work() -> None:
    assert _order(chain(50)) == list(range(50))
    small, large = calls_made(chain(500)), calls_made(chain(2000))
    # linear: 4x the jobs, about 4x the calls (quadratic would be 16x)
    assert large < 5 * small, (small, large)


def test_a_wide_flow_is_ordered_level_by_level() -> None:
    # a root, 98 that depend on it (given in reverse), a sink on all of them
    nodes = [node(0, [])] + [node(i, [0]) for i in range(1, 99)] + [
        node(99, list(range(98, 0, -1)))]
    assert _order(nodes) == list(range(100))
    small = calls_made([node(0, [])] + [node(i, [0]) for i in range(1, 1000)]
                       + [node(1000, list(range(1, 1000)))])
    large = calls_made([node(0, [])] + [node(i, [0]) for i in range(1, 4000)]
                       + [node(4000, list(range(1, 4000)))])
    assert large < 5 * small, (small, large)


def test_a_long_cycle_is_named_from_its_lowest_entry() -> None:
    nodes = [node(0, [])] + [node(i, [i - 1 if i > 1 else 999]) for i in range(1, 1000)]
    with pytest.raises(InvalidArgument) as refused:
        _order(nodes)
    assert refused.value.argument == "jobs[1].depends_on"
    message = str(refused.value)
    assert "forms a cycle: 'k1' -> 'k999' -> 'k998'" in message
    assert message.rstrip().endswith("'k2' -> 'k1'")
