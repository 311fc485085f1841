"""Every named query in sql/ is used by the package, and every name used exists (STYLE 1)."""

from __future__ import annotations

import re
from pathlib import Path

from portqueue.queries import load_templates
from portqueue.resources import resource_dir

PACKAGE = Path(__file__).resolve().parents[2] / "portqueue"
# q("name", …) with the name as a literal, possibly on the next line.
_CALL_RE = re.compile(r"""\bq\(\s*["'](\w+)["']""")


def _referenced() -> dict[str, list[str]]:
    """Query name -> the package files that call it."""
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for name in _CALL_RE.findall(path.read_text(encoding="utf-8")):
            found.setdefault(name, []).append(str(path.relative_to(PACKAGE.parent)))
    return found


def test_the_package_is_read_from_the_checkout() -> None:
    # Otherwise both sides below could silently come from somewhere else.
    assert resource_dir("sql") == PACKAGE.parent / "sql"
    assert _referenced(), "no q(\"…\") calls found: the pattern no longer matches the code"


def test_every_named_query_is_used() -> None:
    unused = set(load_templates()) - set(_referenced())
    assert not unused, f"named queries in sql/ that no code calls: {sorted(unused)}"


def test_every_used_name_exists() -> None:
    missing = {
        name: files for name, files in _referenced().items() if name not in load_templates()}
    assert not missing, f"q() calls naming no query in sql/: {missing}"


def test_every_query_has_a_body() -> None:
    empty = [name for name, text in load_templates().items() if not text.strip()]
    assert not empty, f"named queries with no SQL: {empty}"
