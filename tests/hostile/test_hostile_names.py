"""Names from anywhere: schema names (the one thing composed into SQL, as an
identifier) and every text option of add_job (queue, idempotency_key,
singleton_key, group_id), given any text, lone surrogates, NUL, lengths one
either side of the limit, and values that are not text at all.

A refused value raises a ValueError naming the argument: a schema name before
any connection (rows, schemas and catalog as they were), a text option before
its operation sends any statement (tests/support/recording.py); an accepted
one reads back byte for byte.
An accepted schema name is a working schema even where it needs quoting (a
reserved word, mixed case, the longest allowed).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from psycopg import sql

from portqueue import PortQueue
from portqueue.migrate import migrate
from tests.hostile.support import HOSTILE
from tests.migrations.catalog import schema_catalog
from tests.support.recording import refused_before_io
from tests.support.refusals import Unchanged, assert_refused, refusal

# The SPEC's "validated as an identifier", as the docs state it: a letter or _,
# then letters, digits or _, 48 at most, and not a name Postgres reserves.
SCHEMA_RULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,47}")

not_text = st.sampled_from([None, b"portqueue", 5, 1.5, True, ["a"], ("a",), {"a": 1}])
identifier_like = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,50}", fullmatch=True)
hostile_schema_names = (st.text(max_size=60) | identifier_like | not_text | st.sampled_from([
    'a"b', "a;drop schema public", "x" * 49, "pg_x", "PG_x", "information_schema",
    "portqueue\x00", "\u0130stanbul", "schéma", "a b", "a-b", "1a", "", " a", "a\n",
    "\ud800", "\uff41",  # fullwidth "a": isalpha() but not ASCII
]))


def schema_valid(name: object) -> bool:
    return (isinstance(name, str) and SCHEMA_RULE.fullmatch(name) is not None
            and not name.startswith("pg_") and name != "information_schema")


@HOSTILE
@given(name=hostile_schema_names)
def test_a_schema_name_is_refused_before_io_or_is_a_plain_identifier(
    pg_dsn: str, db: psycopg.Connection[Any], schema: str, name: Any
) -> None:
    before = Unchanged(db, schema)
    error = refusal(lambda: PortQueue(pg_dsn, schema=name).close())
    if schema_valid(name):
        assert error is None, f"{name!r} was refused: {error}"
        return
    assert error is not None, f"{name!r} was accepted"
    assert_refused(error, "schema")
    migrate_error = refusal(lambda: migrate(pg_dsn, schema=name))
    assert migrate_error is not None
    assert_refused(migrate_error, "schema")
    before.assert_unchanged()


@pytest.fixture
def fresh_schema(
    request: pytest.FixtureRequest, db: psycopg.Connection[Any]
) -> Iterator[str]:
    name = request.param
    drop = sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name))
    db.execute(drop)
    yield name
    db.execute(drop)


@pytest.mark.parametrize("fresh_schema", ["select", "Mixed_Case9", "x" * 48],
                         indirect=True, ids=["reserved-word", "mixed-case", "longest"])
def test_an_accepted_schema_name_that_needs_quoting_works_end_to_end(
    pg_dsn: str, db: psycopg.Connection[Any], fresh_schema: str
) -> None:
    migrate(pg_dsn, schema=fresh_schema)
    catalog = schema_catalog(db, fresh_schema)
    assert {row[0] for row in catalog["relations"]} >= {"job", "queue", "schedule"}
    with PortQueue(pg_dsn, schema=fresh_schema) as client:
        added = client.add_job(queue="quoted", data={"schema": fresh_schema})
        assert client.get_job(job_id=added.job_id).data == {"schema": fresh_schema}
        assert client.get_queue_stats(queue="quoted").counts
    # Nothing leaked into a schema named after the unquoted (folded) spelling.
    folded = db.execute("SELECT count(*) FROM pg_namespace WHERE nspname = %s",
                        [fresh_schema.lower()]).fetchone()
    assert folded == ((1,) if fresh_schema == fresh_schema.lower() else (0,))


# --- text options ---

TEXT_OPTIONS = {"queue": 128, "idempotency_key": 512, "singleton_key": 512, "group_id": 512}


def text_valid(value: object, limit: int, optional: bool) -> bool:
    if value is None:
        return optional
    if not isinstance(value, str) or not 1 <= len(value) <= limit or "\x00" in value:
        return False
    return not any("\ud800" <= c <= "\udfff" for c in value)


@st.composite
def text_cases(draw: st.DrawFn) -> tuple[str, Any]:
    option = draw(st.sampled_from(sorted(TEXT_OPTIONS)))
    limit = TEXT_OPTIONS[option]
    value = draw(
        st.text(max_size=20)
        | st.text(st.characters(codec="utf-8"), min_size=limit - 1, max_size=limit + 1)
        | st.text(st.characters(categories=["Cs"]), min_size=1, max_size=3)
        | not_text
        | st.sampled_from(["\x00", "a\x00", "'; DROP TABLE job; --", "%s", "%(queue)s", "{schema}",
                           "\\", "$1", "\U0001f600" * limit, "\U0001f600" * (limit + 1)]))
    return option, value


@HOSTILE
@given(case=text_cases())
@example(case=("queue", "\ud83d\ude00"))  # a surrogate pair spelled as two lone halves
def test_a_text_option_is_refused_by_name_or_read_back_byte_exact(
    client: Any, db: psycopg.Connection[Any], schema: str, case: tuple[str, Any]
) -> None:
    option, value = case
    options = {"queue": "names", option: value}
    valid = text_valid(value, TEXT_OPTIONS[option], optional=option != "queue")
    error = refused_before_io("add_job", data=1, **options)
    if not valid:
        assert error is not None, f"{option}={value!r} was accepted"
        assert_refused(error, option)
        return
    assert error is None, f"{option}={value!r} was refused: {error}"
    added = [client.add_job(data=1, **options)]
    snapshot = client.get_job(job_id=added[0].job_id)
    stored = getattr(snapshot, option)
    assert stored == value and (value is None or stored.encode() == value.encode())
