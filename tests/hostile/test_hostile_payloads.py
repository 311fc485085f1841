"""Payloads at and past the edges: NaN and Infinity anywhere in a tree, sizes
one byte either side of the limit (in UTF-8 bytes, not characters) for the
default, a small and the largest allowed limit, 100 MB, nesting one level
either side of the depth cap and a million levels deep, and Python values
JSON has no word for.

Each is refused before I/O with a ValueError naming ``data`` (``jobs[i].data``
in a batch) and nothing written, or stored and read back exactly.
tests/integration/test_bad_input.py and test_roundtrip_properties.py cover the
default limit +1, NUL and lone surrogates; this file does not repeat them.
"""

from __future__ import annotations

import enum
import math
import time
from collections import OrderedDict
from collections.abc import Iterator
from datetime import datetime
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from portqueue import PayloadTooLarge, PortQueue
from portqueue.validation import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    MAX_PAYLOAD_BYTES_LIMIT,
    MAX_PAYLOAD_DEPTH,
)
from tests.hostile.support import HOSTILE
from tests.support.clients import BlockingAsyncClient
from tests.support.inputs import exact, exact_string, json_values, jsonb_model
from tests.support.recording import refused_before_io
from tests.support.refusals import Unchanged, assert_refused, refusal

QUEUE = "hostile"

non_finite = st.sampled_from([math.nan, math.inf, -math.inf, float("-nan")])


@st.composite
def trees_holding(draw: st.DrawFn, bad: st.SearchStrategy[Any]) -> Any:
    """A JSON tree with ``bad`` placed somewhere inside (or as the whole value)."""
    value = draw(bad)
    for _ in range(draw(st.integers(0, 4))):
        filler = draw(json_values)
        if draw(st.booleans()):
            value = [filler, value] if draw(st.booleans()) else [value]
        else:
            value = {draw(st.text(max_size=5)): value, "\x01filler": filler}
    return value


@HOSTILE
@given(data=trees_holding(non_finite), batch=st.booleans())
def test_nan_and_infinity_anywhere_are_refused_as_data(data: Any, batch: bool) -> None:
    if batch:
        error = refused_before_io("add_jobs", queue=QUEUE, jobs=[{"data": 1}, {"data": data}])
        argument = "jobs[1].data"
    else:
        error = refused_before_io("add_job", queue=QUEUE, data=data)
        argument = "data"
    assert error is not None, f"{data!r} was accepted"
    assert_refused(error, argument)


# --- sizes: the limit is on the compact UTF-8 encoding, in bytes ---


@pytest.fixture
def sized_client(
    request: pytest.FixtureRequest, pg_dsn: str, schema: str
) -> Iterator[tuple[Any, int]]:
    kind, limit = request.param
    client: Any
    if kind == "sync":
        client = PortQueue(pg_dsn, schema=schema, max_payload_bytes=limit)
    else:
        from portqueue import AsyncPortQueue

        client = BlockingAsyncClient(
            lambda: AsyncPortQueue(pg_dsn, schema=schema, max_payload_bytes=limit))
    try:
        yield client, limit
    finally:
        client.close()


SIZED = [("sync", 1000), ("async", 1000), ("sync", DEFAULT_MAX_PAYLOAD_BYTES),
         ("async", DEFAULT_MAX_PAYLOAD_BYTES)]


@pytest.mark.parametrize("sized_client", SIZED, indirect=True,
                         ids=[f"{kind}-{limit}" for kind, limit in SIZED])
@pytest.mark.parametrize("unit", ["x", "\u00e9", "\U0001f600", '"'])
def test_one_byte_either_side_of_the_limit(
    sized_client: tuple[Any, int], db: psycopg.Connection[Any], schema: str, unit: str
) -> None:
    client, limit = sized_client
    for size in (limit - 1, limit):
        data = exact_string(size, unit)
        added = client.add_job(queue=QUEUE, data=data)
        assert client.get_job(job_id=added.job_id).data == data
    over = exact_string(limit + 1, unit)
    assert len(over) <= limit, "multi-byte units: under the limit in characters, over in bytes"
    before = Unchanged(db, schema)
    for call, argument in ((lambda: client.add_job(queue=QUEUE, data=over), "data"),
                           (lambda: client.add_jobs(queue=QUEUE, jobs=[{"data": over}]),
                            "jobs[0].data")):
        error = refusal(call)
        assert isinstance(error, PayloadTooLarge), f"{limit + 1} bytes accepted"
        assert_refused(error, argument)
    before.assert_unchanged()


@pytest.mark.parametrize("sized_client", [("sync", MAX_PAYLOAD_BYTES_LIMIT)], indirect=True)
def test_the_largest_allowed_limit_stores_exactly_that_much(
    sized_client: tuple[Any, int], db: psycopg.Connection[Any], schema: str
) -> None:
    client, limit = sized_client
    data = exact_string(limit, "\U0001f600")
    added = client.add_job(queue=QUEUE, data=data)
    assert client.get_job(job_id=added.job_id).data == data
    before = Unchanged(db, schema)
    error = refusal(lambda: client.add_job(queue=QUEUE, data=exact_string(limit + 1)))
    assert isinstance(error, PayloadTooLarge)
    assert_refused(error, "data")
    before.assert_unchanged()


@pytest.mark.parametrize("limit", [0, -1, MAX_PAYLOAD_BYTES_LIMIT + 1, True, 1024.0, "1024",
                                   2**63])
def test_a_hostile_payload_limit_is_refused_by_the_constructor(
    pg_dsn: str, schema: str, limit: Any
) -> None:
    error = refusal(lambda: PortQueue(pg_dsn, schema=schema, max_payload_bytes=limit))
    assert error is not None
    assert_refused(error, "max_payload_bytes")


def test_a_100_mb_payload_is_refused_quickly_and_writes_nothing() -> None:
    hundred_mb = "x" * (100 * 1024 * 1024)
    shapes = [hundred_mb, [hundred_mb[:1024]] * (100 * 1024)]
    for data in shapes:
        started = time.process_time()
        for method, kwargs, argument in (
                ("add_job", {"data": data}, "data"),
                ("add_jobs", {"jobs": [{"data": 1}, {"data": data}]}, "jobs[1].data")):
            error = refused_before_io(method, queue=QUEUE, **kwargs)
            assert isinstance(error, PayloadTooLarge)
            assert_refused(error, argument)
        # Refused on its size, not after encoding all of it: CPU time, which
        # a loaded CI host does not inflate the way it does wall time.
        assert time.process_time() - started < 10


# --- nesting ---


def nested(depth: int, kinds: str) -> Any:
    """``depth`` levels of containers, alternating through ``kinds`` ("l" list, "d" dict)."""
    value: Any = 0
    for level in range(depth):
        value = [value] if kinds[level % len(kinds)] == "l" else {"k": value}
    return value


@pytest.mark.parametrize("kinds", ["d", "ld", "dld"])
def test_nesting_one_level_either_side_of_the_cap(
    client: Any, db: psycopg.Connection[Any], schema: str, kinds: str
) -> None:
    deepest = nested(MAX_PAYLOAD_DEPTH, kinds)
    added = client.add_job(queue=QUEUE, data=deepest)
    assert client.get_job(job_id=added.job_id).data == deepest
    error = refused_before_io("add_job", queue=QUEUE, data=nested(MAX_PAYLOAD_DEPTH + 1, kinds))
    assert error is not None
    assert_refused(error, "data")


def test_a_million_levels_deep_is_refused_without_a_recursion_error() -> None:
    error = refused_before_io("add_jobs", queue=QUEUE, jobs=[{"data": nested(1_000_000, "ld")}])
    assert error is not None
    assert_refused(error, "jobs[0].data")


# --- Python values JSON has no word for ---


class Colour(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


class Mood(str, enum.Enum):
    CALM = "calm"


REFUSED_TYPES = [
    b"bytes", bytearray(b"x"), Decimal("1.5"), datetime(2026, 1, 1), Colour.RED, object(),
    {"when": datetime(2026, 1, 1)}, [1, 2, {3}], {True: 1}, {None: 1}, {1.5: "x"},
    {(1, 2): "x"}, 10**4300, complex(1, 2), frozenset(), range(3),
]
# Accepted, and read back as the JSON they encode to: the SPEC's "any JSON
# value" taken at json.dumps's word (a tuple is an array, an IntEnum its int).
NORMALISED = [
    ((1, 2), [1, 2]),
    ({"t": (1, (2,))}, {"t": [1, [2]]}),
    (Level.HIGH, 3),
    (Mood.CALM, "calm"),
    (OrderedDict([("b", 1), ("a", 2)]), {"a": 2, "b": 1}),
    (10**4299, 10**4299),
]


@pytest.mark.parametrize("data", REFUSED_TYPES, ids=lambda v: type(v).__name__)
def test_values_json_cannot_hold_are_refused(
    client: Any, db: psycopg.Connection[Any], schema: str, data: Any
) -> None:
    before = Unchanged(db, schema)
    error = refusal(lambda: client.add_job(queue=QUEUE, data=data))
    assert error is not None, f"{data!r} was accepted"
    assert_refused(error, "data")
    before.assert_unchanged()


@pytest.mark.parametrize(("data", "stored"), NORMALISED, ids=lambda v: type(v).__name__)
def test_values_json_encodes_read_back_as_their_json(
    client: Any, data: Any, stored: Any
) -> None:
    added = client.add_job(queue=QUEUE, data=data)
    back = client.get_job(job_id=added.job_id).data
    assert exact(back) == exact(jsonb_model(stored))
