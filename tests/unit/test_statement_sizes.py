"""The statements of the hot paths fit psycopg's conversion cache.

psycopg converts a statement's ``%(name)s`` placeholders once per text and keeps
the result only for texts of up to MAX_CACHED_STATEMENT_LENGTH bytes; a longer
one is converted on every execute (docs/performance.md, "claims (session
2026-12-04)"). Growing one of these past the limit is a cost on every claim,
add or outcome: the test says so."""

from __future__ import annotations

import pytest
from psycopg._queries import MAX_CACHED_STATEMENT_LENGTH

from portqueue.queries import queries_for

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
