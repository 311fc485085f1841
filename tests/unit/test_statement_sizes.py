"""The statements of the hot paths fit psycopg's conversion cache.

psycopg converts a statement's ``%(name)s`` placeholders once per text and keeps
the result only for texts of up to MAX_CACHED_STATEMENT_LENGTH bytes; a longer
one is converted on every execute (docs/performance.md, "claims (session
2026-12-04)"). Growing one of these past the limit is a cost on every claim,
add or outcome: the test says so. The longer ones are converted once by
portqueue itself (``Query.positional``)."""

from __future__ import annotations

import re

import pytest
from psycopg._queries import MAX_CACHED_STATEMENT_LENGTH

from portqueue.queries import CONVERTED_BY_PSYCOPG_BYTES, Positional, positional, queries_for

# The plain claim (every claim of a worker whose queues hold no patterned or
# keyed job), single and batch adds, and the worker's writes per outcome.
HOT = ("claim_plain", "add_job_to_open_queue", "add_job", "add_jobs", "complete_jobs",
       "fail_jobs", "touch_jobs", "snooze_jobs", "release_jobs", "lock_limited_queue")


@pytest.mark.parametrize("name", HOT)
def test_a_hot_statement_is_converted_once(name: str) -> None:
    # The default schema's name; each of claim_plain's ten references to a
    # longer one adds its extra length.
    size = len(queries_for("portqueue")(name).sql.encode())
    assert size <= MAX_CACHED_STATEMENT_LENGTH, (
        f"{name} is {size} bytes, over psycopg's {MAX_CACHED_STATEMENT_LENGTH}")


def test_the_server_gets_no_indentation() -> None:
    text = queries_for("portqueue")("claim_plain").sql
    assert "\n " not in text


def test_a_longer_statement_is_converted_once_by_portqueue() -> None:
    """Past the limit the text carries its ``$n`` form, which reads back as the
    text itself; below it, none (psycopg's cache serves it)."""
    assert CONVERTED_BY_PSYCOPG_BYTES == MAX_CACHED_STATEMENT_LENGTH
    q = queries_for("portqueue")
    long = {name for name in q.names if q(name).positional is not None}
    assert {"claim", "claim_limited"} <= long
    for name in q.names:
        query = q(name)
        if query.positional is None:
            assert len(query.sql.encode()) <= MAX_CACHED_STATEMENT_LENGTH, name
            continue
        assert _named(query.positional) == query.sql, name
        assert len(set(query.positional.names)) == len(query.positional.names), name


def _named(converted: Positional) -> str:
    """The ``%(name)s`` text a ``$n`` one stands for."""
    return re.sub(r"\$(\d+)", lambda m: f"%({converted.names[int(m.group(1)) - 1]})s",
                  converted.sql)


def test_a_stray_percent_is_refused() -> None:
    with pytest.raises(ValueError, match="not a %\\(name\\)s placeholder"):
        positional("SELECT 1 WHERE 'a' LIKE 'a%'")
    assert positional("SELECT %(a)s, %(b)s, %(a)s") == Positional("SELECT $1, $2, $1", ("a", "b"))
