"""``preferred_instance_key_pattern`` given patterns built to be expensive: bounded
repetitions nested inside each other, alternations of them, classes and
wildcards under counts, up to the validator's limits.

What add_job accepts, PostgreSQL compiles and evaluates, against the producer's
key and against keys a worker may have (empty, the longest allowed, near
misses), within a deadline, in a session that has never seen it. What it does
not accept is refused with a ValueError naming the argument and nothing
written. (Issue 16: the local size estimate alone passed patterns PostgreSQL
spent seconds on, then refused.)
"""

from __future__ import annotations

from typing import Any

import psycopg
from hypothesis import example, given
from hypothesis import strategies as st

from portqueue import PortQueue
from portqueue.validation import MAX_KEY_LENGTH
from tests.hostile.support import HOSTILE
from tests.support.refusals import Unchanged, assert_refused, refusal

QUEUE = "hostile"
ARGUMENT = "preferred_instance_key_pattern"
PRODUCER_KEY = "test-host-ram-8gb"  # tests/conftest.py's clients
# A stored pattern must cost a worker less than this to compile and match
# once, on a server busy with other tests (the worker's own deadline,
# portqueue.worker.patterns.JUDGE_DEADLINE_MS, is a fifth of it).
DEADLINE_MS = 1_000
WORKER_KEYS = [PRODUCER_KEY, "", "a" * MAX_KEY_LENGTH, "ab" * (MAX_KEY_LENGTH // 2),
               "gpu-box-a100", "b" + "a" * 254 + "b"]

counts = st.sampled_from(["*", "+", "?", "{0,20}", "{2}", "{1,3}", "{0,255}", "{255}",
                          "{39}", "{128}", "{200}", "{0,}", "{3,}"])
atoms = st.sampled_from(["a", "b", ".", "[a-z]", "[^b]", "\\d", "\\w", "-", "(?:a|b)"])


def repeated(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    group = st.tuples(inner, counts).map(lambda parts: f"({parts[0]}){parts[1]}")
    sequence = st.lists(inner, min_size=2, max_size=3).map("".join)
    alternation = st.lists(inner, min_size=2, max_size=3).map("|".join)
    return group | sequence | alternation


expensive_patterns = st.recursive(
    st.tuples(atoms, counts | st.just("")).map("".join), repeated, max_leaves=6
).map(lambda body: body + "b")


def compiles_in_time(db: psycopg.Connection[Any], pattern: str) -> None:
    """Compile ``pattern`` afresh and match it against every worker key, in time."""
    with db.transaction():
        db.execute("SELECT set_config('statement_timeout', %s, true)", [str(DEADLINE_MS)])
        for key in WORKER_KEYS:
            db.execute("SELECT %s::text ~ %s::text", [key, pattern])


@HOSTILE
@given(pattern=expensive_patterns)
@example(pattern="((a{0,20}){0,20}){0,20}b")  # issue 16.1: refused by PostgreSQL, slowly
@example(pattern="(a{0,255}){39}b")  # issue 16.2: slow to compile
@example(pattern="(a{255}){128}")  # the local size cap's edge
def test_an_accepted_pattern_compiles_and_matches_within_the_deadline(
    pq: PortQueue, pg_dsn: str, db: psycopg.Connection[Any], schema: str, pattern: str
) -> None:
    before = Unchanged(db, schema)
    error = refusal(lambda: pq.add_job(queue=QUEUE, data={},
                                       preferred_instance_key_pattern=pattern))
    if error is not None:
        assert_refused(error, ARGUMENT)
        before.assert_unchanged()
        return
    # A new session: PostgreSQL caches compiled patterns per session.
    with psycopg.connect(pg_dsn, autocommit=True) as fresh:
        compiles_in_time(fresh, pattern)
