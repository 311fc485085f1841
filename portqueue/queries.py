"""The named SQL in sql/*.sql, parsed once and rendered per schema.

A block starts with ``-- name: <name>`` and runs to the next one. ``{schema}``
is replaced through ``psycopg.sql.Identifier``; values stay ``%(name)s``
parameters, bound by the driver. Nothing else is ever put into SQL text.

A block starting with ``-- fragment: <name>`` is not a statement but a piece
several statements share (the dead-letter copy, a prune batch's tail). A
statement includes it as ``{<name>}``; it is rendered for the schema first,
so it may use ``{schema}`` too. Fragments hold only constant SQL, never a
value, so sharing them is the same as writing them out twice.
"""

from __future__ import annotations

import functools
import re
import string
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from psycopg import sql

from portqueue.resources import resource_dir

_BLOCK_RE = re.compile(r"^-- (name|fragment): (\w+)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Query:
    """One statement to run: which named query, its rendered SQL and its parameters."""

    name: str
    sql: str
    params: Mapping[str, Any]


@dataclass(frozen=True)
class Batch:
    """Statements to send back to back in one transaction, without waiting for
    each one's rows: the runner pulls the next from ``queries`` (which may
    build it only then) while the server runs the one before, and answers
    with all their rows, in order."""

    queries: Iterator[Query]


@functools.cache
def load_blocks() -> dict[str, dict[str, str]]:
    """Every block of every file in sql/, by kind ("name" or "fragment") and name."""
    blocks: dict[str, dict[str, str]] = {"name": {}, "fragment": {}}
    for path in sorted(resource_dir("sql").glob("*.sql")):
        parts = _BLOCK_RE.split(path.read_text(encoding="utf-8"))
        for kind, name, body in zip(parts[1::3], parts[2::3], parts[3::3], strict=True):
            if name in blocks["name"] or name in blocks["fragment"]:
                raise RuntimeError(f"block {name!r} is defined twice (second in {path.name})")
            blocks[kind][name] = _strip_comments(body).rstrip(";")
    return blocks


def load_templates() -> dict[str, str]:
    """Every named statement (schema.sql holds none)."""
    return load_blocks()["name"]


def load_fragments() -> dict[str, str]:
    """Every shared piece of statements."""
    return load_blocks()["fragment"]


def _strip_comments(body: str) -> str:
    # Whole-line comments are for readers of sql/; dropping them keeps a stray
    # "%" or brace in prose from being read as a placeholder.
    lines = [line for line in body.splitlines() if not line.lstrip().startswith("--")]
    return "\n".join(lines).strip()


class Queries:
    """The named queries rendered for one schema, plus its NOTIFY channel names."""

    def __init__(self, schema: str) -> None:
        self.schema = schema
        quoted = sql.Identifier(schema)
        fragments = _render_fragments(quoted)
        self._rendered = {
            name: sql.SQL(template).format(schema=quoted, **fragments).as_string()
            for name, template in load_templates().items()
        }
        # Channel names match the triggers in the migrations: "<schema>.<topic>".
        self.job_channel = f"{schema}.job"
        self.cancel_channel = f"{schema}.cancel"
        self.finished_channel = f"{schema}.finished"

    def __call__(self, name: str, **params: Any) -> Query:
        return Query(name, self._rendered[name], params)

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self._rendered)


def _render_fragments(schema: sql.Identifier) -> dict[str, sql.Composable]:
    """Every fragment rendered for ``schema``, the fragments it includes first."""
    texts = load_fragments()
    rendered: dict[str, sql.Composable] = {}

    def render(name: str, including: tuple[str, ...]) -> sql.Composable:
        if name in including:
            raise RuntimeError(f"fragment {name!r} includes itself: {' -> '.join(including)}")
        if name not in rendered:
            text = texts[name]
            parts = {field: render(field, (*including, name))
                     for _, field, _, _ in string.Formatter().parse(text)
                     if field in texts}
            rendered[name] = sql.SQL(text).format(schema=schema, **parts)
        return rendered[name]

    for name in texts:
        render(name, ())
    return rendered


@functools.lru_cache(maxsize=32)
def queries_for(schema: str) -> Queries:
    return Queries(schema)


def statement_names(text: str) -> list[str]:
    """The named statements of one sql/ file's text, in file order (its fragments left out)."""
    return [name for kind, name in _BLOCK_RE.findall(text) if kind == "name"]
