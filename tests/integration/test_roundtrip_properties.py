"""Properties, on a real Postgres: what portqueue accepts it stores exactly, what it
cannot store it refuses before any I/O.

jsonb's normalisation, as it reaches a Python caller (each checked below):
- object keys come back ordered by jsonb's rule, shorter (in UTF-8 bytes)
  first, then bytewise; dict equality is unaffected, iteration order is not;
- -0.0 comes back as 0.0 (numeric has no negative zero);
- nothing else: ints of any size Python will print (up to 4300 digits) come
  back equal; floats come back as the same float (portqueue writes floats of
  1e16 and above positionally, "10000000000000000.0", which jsonb would
  otherwise read back as an int); duplicate keys cannot arise, since a dict
  has none and non-string keys (which json.dumps would merge, {1: a, "1": b})
  are refused.
"""

from __future__ import annotations

import math
import re
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from psycopg import sql

from portqueue import InvalidArgument, JobStatus, PortQueue, validation
from tests.support.inputs import exact, json_values, jsonb_model
from tests.support.rows import count_jobs

PROPERTY = settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

def test_exact_tells_apart_what_plain_equality_does_not() -> None:
    # The comparison below must be able to fail where == would not.
    assert [1] == [1.0] and exact([1]) != exact([1.0])
    assert [True] == [1] and exact([True]) != exact([1])
    assert 0.0 == -0.0 and exact(0.0) != exact(-0.0)
    assert {"a": 1, "bb": 2} == {"bb": 2, "a": 1} and exact({"a": 1, "bb": 2}) != exact(
        {"bb": 2, "a": 1})


@PROPERTY
@given(data=json_values)
@example(data=1e16)
@example(data=[1.7976931348623157e308, -5e-324, 2.0**53 + 2, 1e-7, 0.1])
@example(data=10**4299)
@example(data=-(10**4299))
@example(data={"bb": 1, "a": 2, "\U0001f600": 3, "é": 4, "": 5})
@example(data=-0.0)
@example(data={"k": "\\u0000", "\\u0000": "\\\\u0000"})
@example(data=[None, True, False, 0, "", [], {}])
@example(data={"\\u00000\\u0000": 1e16, "v": ["\\u00000\\u0000", 2e16]})  # placeholder look-alike
def test_json_payload_round_trips_exactly(pq: PortQueue, data: Any) -> None:
    added = pq.add_job(queue="round-trip", data=data)
    snapshot = pq.get_job(job_id=added.job_id)
    assert snapshot is not None
    assert exact(snapshot.data) == exact(jsonb_model(data))
    # with dict equality (order-blind) and -0.0 == 0.0, it is simply equal
    assert snapshot.data == data


def test_key_order_and_negative_zero_are_jsonb_normalisations(pq: PortQueue) -> None:
    data = {"bb": 1, "a": 2, "\U0001f600": 3, "é": 4, "c": -0.0}
    stored = pq.get_job(job_id=pq.add_job(queue="normalised", data=data).job_id)
    assert stored is not None
    assert list(stored.data) == ["a", "c", "bb", "é", "\U0001f600"]
    assert math.copysign(1.0, stored.data["c"]) == 1.0


@PROPERTY
@given(data=st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: abs(f) >= 1e16))
def test_big_floats_come_back_as_floats(pq: PortQueue, data: float) -> None:
    stored = pq.get_job(job_id=pq.add_job(queue="floats", data={"f": data}).job_id)
    assert stored is not None
    assert type(stored.data["f"]) is float and stored.data["f"] == data


def test_deepest_accepted_payload_reads_back_from_a_deep_stack(pq: PortQueue) -> None:
    # The depth cap exists so that a reader deeper in its own stack than the
    # writer can still decode the job (json.loads recurses once per level).
    data: list[Any] = []
    inner = data
    for _ in range(validation.MAX_PAYLOAD_DEPTH - 1):
        inner.append([])
        inner = inner[0]
    job_id = pq.add_job(queue="deep", data=data).job_id

    def read_from_depth(frames: int) -> Any:
        return read_from_depth(frames - 1) if frames else pq.get_job(job_id=job_id)

    stored = read_from_depth(500)
    assert stored is not None and stored.data == data


# --- refused before any I/O ---

unstorable_char = st.just("\x00") | st.characters(categories=["Cs"])
unstorable_text = st.builds(lambda a, bad, b: a + bad + b, st.text(), unstorable_char, st.text())


def _place(shape: int, bad: str, filler: Any) -> Any:
    return [
        bad,
        {"ok": filler, "k": bad},
        {bad: filler},
        [filler, {"nested": [bad]}],
        {"deep": {bad: [filler]}},
    ][shape]


@dataclass
class UnusedClient:
    """A client only ever given bad input, and the application_name its pool would use."""

    client: PortQueue
    name: str

    def connections(self, db: psycopg.Connection[Any]) -> int:
        """Server connections it opened: its pool names them "<application_name>:<role>"."""
        row = db.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE %s",
                         [self.name + ":%"]).fetchone()
        assert row is not None
        return int(row[0])


@pytest.fixture
def unused(pg_dsn: str, schema: str) -> Iterator[UnusedClient]:
    name = f"pq-never-io-{uuid.uuid4().hex[:12]}"  # unique: other tests' backends may linger
    with PortQueue(pg_dsn, schema=schema, instance_key="test-host-ram-8gb",
                   application_name=name) as client:
        yield UnusedClient(client, name)


@PROPERTY
@given(bad=unstorable_text, shape=st.integers(0, 4), filler=json_values)
def test_text_with_nul_or_a_surrogate_is_refused_before_io(
    unused: UnusedClient, db: psycopg.Connection[Any], schema: str,
    bad: str, shape: int, filler: Any,
) -> None:
    with pytest.raises(InvalidArgument) as info:
        unused.client.add_job(queue="refused", data=_place(shape, bad, filler))
    assert info.value.argument == "data"
    assert count_jobs(db, schema) == 0
    assert unused.connections(db) == 0


def test_never_io_check_sees_a_connection(unused: UnusedClient,
                                          db: psycopg.Connection[Any]) -> None:
    # The pg_stat_activity check above must be able to fail.
    unused.client.get_queues()
    assert unused.connections(db) >= 1


@PROPERTY
@given(bad=unstorable_text, queue_kind=st.integers(0, 2))
def test_names_with_nul_or_a_surrogate_are_refused_before_io(
    unused: UnusedClient, db: psycopg.Connection[Any], schema: str,
    bad: str, queue_kind: int,
) -> None:
    cases: list[tuple[str, dict[str, Any]]] = [
        ("queue", {"queue": bad[:128]}),
        ("idempotency_key", {"queue": "q", "idempotency_key": bad[:512]}),
        ("group_id", {"queue": "q", "group_id": bad[:512]}),
    ]
    argument, kwargs = cases[queue_kind]
    if not any(c == "\x00" or "\ud800" <= c <= "\udfff" for c in kwargs[argument]):
        return  # truncation cut the bad character off
    with pytest.raises(InvalidArgument) as info:
        unused.client.add_job(data=1, **kwargs)
    assert info.value.argument == argument
    assert unused.connections(db) == 0
    row = db.execute(sql.SQL("SELECT count(*) FROM {}").format(
        sql.Identifier(schema, "queue"))).fetchone()
    assert row == (0,)


# --- queue names ---

queue_names = st.text(st.characters(codec="utf-8", exclude_characters="\x00"),
                      min_size=1, max_size=128)


@PROPERTY
@given(queue=queue_names)
@example(queue="q" * 128)
@example(queue="\U0001f600" * 128)
@example(queue="'; DROP TABLE job; --")
@example(queue="%s %(queue)s $1 $$ {schema}")
@example(queue=" ")
@example(queue="e\u0301")  # not normalised to "é"
@example(queue="\\u0000")
def test_queue_names_are_stored_byte_exact(
    pq: PortQueue, db: psycopg.Connection[Any], schema: str, queue: str
) -> None:
    added = pq.add_job(queue=queue, data=1)
    assert added.queue == queue
    snapshot = pq.get_job(job_id=added.job_id)
    assert snapshot is not None and snapshot.queue == queue
    stored = db.execute(
        sql.SQL("SELECT convert_to(j.queue, 'UTF8'), convert_to(q.name, 'UTF8') "
                "FROM {} AS j JOIN {} AS q ON q.name = j.queue WHERE j.id = %s").format(
            sql.Identifier(schema, "job"), sql.Identifier(schema, "queue")),
        [added.job_id]).fetchone()
    assert stored == (queue.encode(), queue.encode())
    assert pq.get_queue_stats(queue=queue).counts[JobStatus.PENDING] >= 1
    assert added.job_id in {job.job_id for job in pq.get_jobs(queue=queue, limit=500).items}


# --- preferred_instance_key_pattern: accepted here => accepted by Postgres ---

REGEX_TOKENS = [
    "a", "b", "z", "-", "é", "\U0001f600", ".", "^", "$", "|", "(", ")", "(?:", "(?=", "(?!",
    "(?<=", "(?<!", "(?P<n>", "(?>", "(?i)", "(?s)", "(?x)", "(?#", "[", "]", "[^", "[:alpha:]",
    "[.", "[=", "{", "}", "{2}", "{1,3}", "{0,}", "{,2}", "{255}", "{256}", "{3,1}", ",", "0",
    "9", "*", "+", "?", "\\", "\\d", "\\D", "\\w", "\\W", "\\s", "\\b", "\\B", "\\A", "\\Z",
    "\\1", "\\n", "\\.", "\\-", "\\]", "\\[", "\\x41", "\\y", "#", " ", "&&", "--", "~", "||",
]


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tokens=st.lists(st.sampled_from(REGEX_TOKENS), min_size=1, max_size=14))
def test_accepted_patterns_are_valid_postgres_regexes(
    db: psycopg.Connection[Any], tokens: list[str]
) -> None:
    pattern = "".join(tokens)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nor may re.compile warn about it
        try:
            validation.regex("preferred_instance_key_pattern", pattern)
        except InvalidArgument:
            return
    re.compile(pattern)
    db.execute("SELECT 'test-host-ram-8gb' ~ %s", [pattern])  # raises if Postgres refuses it
