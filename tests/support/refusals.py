"""The bad-input contract's database side, for every test that checks it
(tests/integration/test_bad_input.py, tests/hostile/): a refused call raises
a ValueError (``InvalidArgument``) naming exactly its argument, and leaves the
rows, the schemas and the catalog as they were."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

from portqueue import InvalidArgument
from tests.migrations.catalog import schema_catalog

TABLES = ("job", "queue", "schedule")


def fingerprint(db: psycopg.Connection[Any], schema: str) -> dict[str, tuple[int, str]]:
    """Per table: row count and an md5 of every row's text, in a stable order."""
    result = {}
    for table in TABLES:
        query = sql.SQL(
            "SELECT count(*), coalesce(md5(string_agg(t::text, '|' ORDER BY t::text)), '') "
            "FROM {} AS t").format(sql.Identifier(schema, table))
        row = db.execute(query).fetchone()
        assert row is not None
        result[table] = (int(row[0]), str(row[1]))
    return result


class Unchanged:
    """Row contents of job/queue/schedule and the schema's catalog, to compare
    before and after a rejected call."""

    def __init__(self, db: psycopg.Connection[Any], schema: str) -> None:
        self.db, self.schema = db, schema
        self.rows = fingerprint(db, schema)
        self.catalog = schema_catalog(db, schema)
        self.namespaces = self._namespaces()

    def _namespaces(self) -> list[str]:
        return [row[0] for row in self.db.execute(
            sql.SQL("SELECT nspname FROM pg_namespace ORDER BY 1"))]

    def assert_unchanged(self) -> None:
        assert fingerprint(self.db, self.schema) == self.rows, "rows were written"
        assert self._namespaces() == self.namespaces, "a schema was created or dropped"
        assert schema_catalog(self.db, self.schema) == self.catalog, "the catalog changed"


def assert_refused(error: BaseException, argument: str) -> None:
    """A ValueError (InvalidArgument) naming exactly ``argument``."""
    assert isinstance(error, InvalidArgument) and isinstance(error, ValueError), repr(error)
    assert error.argument == argument, f"named {error.argument!r}, expected {argument!r}"
    assert str(error).startswith(f"{argument}: ")


def refusal(call: Callable[[], Any]) -> InvalidArgument | None:
    """The InvalidArgument ``call`` raised, or None if it returned; anything else
    (TypeError, OverflowError, a database error) fails the test."""
    try:
        call()
    except InvalidArgument as error:
        return error
    return None


def assert_refused_writing_nothing(
    db: psycopg.Connection[Any], schema: str, call: Callable[[], Any], argument: str
) -> None:
    """``call()`` raises the InvalidArgument naming ``argument``, and writes nothing."""
    unchanged = Unchanged(db, schema)
    error = refusal(call)
    assert error is not None, f"the call was accepted; expected a refusal naming {argument!r}"
    assert_refused(error, argument)
    unchanged.assert_unchanged()
