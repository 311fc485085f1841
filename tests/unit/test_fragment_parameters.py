"""Fragments with parameters (portqueue/queries.py): one shape written once,
each invocation's SQL put in its place, and a wrong invocation refused at load."""

from __future__ import annotations

import pytest

from portqueue.queries import _expand, fragment_parameters, load_blocks

_RANGE = "SELECT j.id FROM {schema}.job AS j\nWHERE j.queue = {queue}\n  AND {range}\nLIMIT {limit}"
_FRAGMENTS = {"range": _RANGE}
_PARAMETERS = {"range": ("queue", "range", "limit")}


def test_an_invocation_is_replaced_by_the_body_with_its_arguments() -> None:
    text = ("x AS (\n    {range(queue => %(queue)s, limit => least(1, 2),\n"
            "           range => j.a IS NULL\n                    AND j.b = 'x,)')}\n)")
    assert _expand(text, _FRAGMENTS, _PARAMETERS, ("x",)) == (
        "x AS (\n    SELECT j.id FROM {schema}.job AS j\n    WHERE j.queue = %(queue)s\n"
        "      AND j.a IS NULL\n          AND j.b = 'x,)'\n    LIMIT least(1, 2)\n)")


@pytest.mark.parametrize("invocation", [
    "{range(queue => q, range => r)}",  # a parameter missing
    "{range(queue => q, range => r, limit => 1, order => o)}",  # one too many
    "{range(queue => q, range r, limit => 1)}",  # not `name => sql`
    "{range(queue => q, range => r, limit => 1)",  # not closed by )}
])
def test_a_wrong_invocation_is_refused(invocation: str) -> None:
    with pytest.raises(RuntimeError):
        _expand(invocation, _FRAGMENTS, _PARAMETERS, ("x",))


def test_no_statement_is_left_with_an_invocation() -> None:
    assert fragment_parameters(), "sql/ has no fragment with parameters: this test checks nothing"
    for kind in load_blocks().values():
        for name, text in kind.items():
            if name in fragment_parameters():
                continue
            for fragment in fragment_parameters():
                assert f"{{{fragment}(" not in text, f"{name}: {fragment} left unexpanded"
