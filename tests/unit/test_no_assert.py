"""No ``assert`` statement in portqueue's code: ``python -O`` strips them, so a
check made with one silently stops being made (issue 16, item 7: a wait
returned None under -O where it raised AssertionError without it).

A condition that cannot happen is a typing construct (``cast``, an exhaustive
match); one that can is a proper check raising a named error.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "portqueue"


def asserts_in(path: Path) -> list[int]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Assert)]


def test_no_assert_statement_in_the_package() -> None:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        lines = asserts_in(path)
        if lines:
            found[str(path.relative_to(PACKAGE.parent))] = lines
    assert not found, f"assert statements (stripped by python -O): {found}"


def test_the_scan_sees_an_assert(tmp_path: Path) -> None:
    # Guard against a scan that finds nothing because it parses nothing.
    sample = tmp_path / "sample.py"
    sample.write_text("def f(x):\n    assert x, 'x'\n    return x\n", encoding="utf-8")
    assert asserts_in(sample) == [2]
    assert any(PACKAGE.rglob("*.py"))
