"""sql/expanded/ is generated from sql/*.sql by tools/expand_sql.py (STYLE 11)."""

from __future__ import annotations

from portqueue.queries import load_fragments, load_templates
from tools.expand_sql import generate, stale


def test_expanded_sql_is_its_regeneration() -> None:
    out_of_date = [path.name for path in stale(generate())]
    assert not out_of_date, (
        f"sql/expanded/ is stale ({', '.join(out_of_date)}): run `python tools/expand_sql.py` "
        "(edit sql/*.sql, never sql/expanded/)")


def test_every_named_statement_is_expanded_once() -> None:
    expanded = "\n".join(generate().values())
    for name in load_templates():
        assert expanded.count(f"-- name: {name}\n") == 1, name
    for fragment in load_fragments():
        assert f"{{{fragment}}}" not in expanded, f"fragment {fragment} left unexpanded"
    assert "{schema}" not in expanded
