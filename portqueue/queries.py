"""The named SQL in sql/*.sql, parsed once and rendered per schema.

A block starts with ``-- name: <name>`` and runs to the next one. ``{schema}``
is replaced through ``psycopg.sql.Identifier``; values stay ``%(name)s``
parameters, bound by the driver. Nothing else is ever put into SQL text.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from psycopg import sql

from portqueue.resources import resource_dir

_NAME_RE = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Query:
    """One statement to run: which named query, its rendered SQL and its parameters."""

    name: str
    sql: str
    params: Mapping[str, Any]


@functools.cache
def load_templates() -> dict[str, str]:
    """Every named block of every file in sql/ (schema.sql holds no named blocks)."""
    templates: dict[str, str] = {}
    for path in sorted(resource_dir("sql").glob("*.sql")):
        parts = _NAME_RE.split(path.read_text(encoding="utf-8"))
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            if name in templates:
                raise RuntimeError(f"query {name!r} is defined twice (second in {path.name})")
            templates[name] = _strip_comments(body).rstrip(";")
    return templates


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
        self._rendered = {
            name: sql.SQL(template).format(schema=quoted).as_string()
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


@functools.lru_cache(maxsize=32)
def queries_for(schema: str) -> Queries:
    return Queries(schema)
