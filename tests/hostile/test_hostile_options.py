"""Every numeric option of add_job / add_jobs, given anything: negative, zero,
huge, ints beyond int32 and int64, bool for int, float for int, NaN, strings,
containers. Each value is either refused before I/O with a ValueError naming
the option's full path (the operation sends no statement: the recording
executor of tests/support/recording.py), or stored and read back exactly
(same value, same type) on a real server.

Which values are valid is written down here, from the SPEC and the column
types, not read from portqueue.validation: a range or type the library gets
wrong shows up as a disagreement.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import psycopg
from hypothesis import given
from hypothesis import strategies as st

from portqueue.validation import JOB_OPTION_KEYS
from tests.hostile.support import HOSTILE, INT32_MAX, hostile_numbers
from tests.support.recording import refused_before_io
from tests.support.refusals import assert_refused
from tests.support.rows import job_row

QUEUE = "hostile"


@dataclass(frozen=True)
class Readback:
    snapshot: Any
    row: dict[str, Any]
    schedule: Any


@dataclass(frozen=True)
class Slot:
    """One numeric option: where it goes, what it accepts, where it is read back."""

    path: tuple[str, ...]
    minimum: int | float
    maximum: int | float
    read: Callable[[Readback], Any]
    optional: bool = True  # None means "the default"
    base: dict[str, Any] = field(default_factory=dict)
    number: bool = False  # any real number in range (else an int, never a bool)
    none_refused_as: str | None = None  # None refused under another name
    recurring: bool = False  # add_job only: add_jobs refuses recurring entries

    @property
    def name(self) -> str:
        return ".".join(self.path)

    def options(self, value: Any) -> dict[str, Any]:
        options = copy.deepcopy(self.base)
        target = options
        for key in self.path[:-1]:
            target = target.setdefault(key, {})
        target[self.path[-1]] = value
        return options

    def refused_as(self, value: Any) -> str | None:
        """The argument a refusal of ``value`` must name; None if it is valid."""
        if value is None:
            return None if self.optional else (self.none_refused_as or self.name)
        if isinstance(value, bool):
            return self.name
        if self.number:
            valid = isinstance(value, (int, float)) and self.minimum <= value <= self.maximum
        else:
            valid = type(value) is int and self.minimum <= value <= self.maximum
        return None if valid else self.name

    def expected(self, value: Any) -> Any:
        return float(value) if self.number else value


def _start_delay(r: Readback) -> int:
    delay: timedelta = r.row["start_after"] - r.row["created_at"]
    assert delay.microseconds == 0
    return int(delay.total_seconds())


SLOTS = [
    Slot(("priority",), -INT32_MAX, INT32_MAX, lambda r: r.snapshot.priority, optional=False),
    Slot(("expire_in_seconds",), 1, INT32_MAX, lambda r: r.row["expire_in_seconds"]),
    Slot(("timeout_seconds",), 1, INT32_MAX, lambda r: r.snapshot.timeout_seconds),
    Slot(("retry", "max_attempts"), 1, 1_000_000, lambda r: r.snapshot.retry.max_attempts,
         optional=False),
    Slot(("retry", "delay_seconds"), 0, INT32_MAX, lambda r: r.snapshot.retry.delay_seconds,
         optional=False),
    Slot(("retry", "backoff", "max_delay_seconds"), 0, INT32_MAX,
         lambda r: r.snapshot.retry.backoff.max_delay_seconds),
    Slot(("retry", "backoff", "factor"), 1, 1000, lambda r: r.snapshot.retry.backoff.factor,
         optional=False, number=True),
    Slot(("retention", "ttl_seconds"), 0, INT32_MAX, lambda r: r.snapshot.retention_ttl_seconds),
    Slot(("schedule", "start_after_seconds"), 0, INT32_MAX, _start_delay,
         optional=False, none_refused_as="schedule"),
    Slot(("schedule", "start_every_seconds"), 1, INT32_MAX, lambda r: r.schedule.every_seconds,
         optional=False, none_refused_as="schedule", recurring=True),
    Slot(("schedule", "misfire_grace_seconds"), 1, INT32_MAX,
         lambda r: r.schedule.misfire_grace_seconds,
         base={"schedule": {"start_every_seconds": 3600}}, recurring=True),
]


@st.composite
def slot_and_value(draw: st.DrawFn, batch: bool = False) -> tuple[Slot, Any]:
    slot = draw(st.sampled_from([s for s in SLOTS if not (batch and s.recurring)]))
    return slot, draw(st.none() | hostile_numbers(int(slot.minimum), int(slot.maximum)))


def read_back(client: Any, db: psycopg.Connection[Any], schema: str, added: Any) -> Readback:
    if added.schedule_id is not None:
        (info,) = [s for s in client.get_schedules(queue=QUEUE, limit=500).items
                   if s.schedule_id == added.schedule_id]
        return Readback(None, {}, info)
    return Readback(client.get_job(job_id=added.job_id), job_row(db, schema, added.job_id), None)


def assert_round_trip(slot: Slot, value: Any, back: Readback) -> None:
    if value is None:
        return  # the default: what it resolves to is the defaults tests' business
    stored = slot.read(back)
    expected = slot.expected(value)
    assert type(stored) is type(expected) and stored == expected, (
        f"{slot.name}: gave {value!r}, read back {stored!r}")


@HOSTILE
@given(case=slot_and_value())
def test_add_job_refuses_or_round_trips_every_numeric_option(case: tuple[Slot, Any]) -> None:
    slot, value = case
    error = refused_before_io("add_job", queue=QUEUE, data={"v": 1}, **slot.options(value))
    argument = slot.refused_as(value)
    if argument is not None:
        assert error is not None, f"{slot.name}={value!r} was accepted"
        assert_refused(error, argument)
    else:
        assert error is None, f"{slot.name}={value!r} was refused: {error}"


@HOSTILE
@given(case=slot_and_value())
def test_accepted_option_values_read_back_exactly(
    client: Any, db: psycopg.Connection[Any], schema: str, case: tuple[Slot, Any]
) -> None:
    slot, value = case
    if slot.refused_as(value) is not None:
        return  # refusals are the test above's
    added = client.add_job(queue=QUEUE, data={"v": 1}, **slot.options(value))
    assert_round_trip(slot, value, read_back(client, db, schema, added))


@HOSTILE
@given(case=slot_and_value(batch=True), position=st.integers(0, 2))
def test_add_jobs_refuses_a_bad_entry_by_index_or_stores_it_exactly(
    client: Any, db: psycopg.Connection[Any], schema: str, case: tuple[Slot, Any], position: int
) -> None:
    slot, value = case
    jobs: list[dict[str, Any]] = [{"data": n} for n in range(3)]
    jobs[position].update(slot.options(value))
    error = refused_before_io("add_jobs", queue=QUEUE, jobs=jobs)
    argument = slot.refused_as(value)
    if argument is not None:
        assert error is not None, f"jobs[{position}].{slot.name}={value!r} was accepted"
        assert_refused(error, f"jobs[{position}].{argument}")
        return
    assert error is None, f"jobs[{position}].{slot.name}={value!r} was refused: {error}"
    results = client.add_jobs(queue=QUEUE, jobs=jobs)
    assert [r.job_id is not None for r in results] == [True] * 3
    assert_round_trip(slot, value, read_back(client, db, schema, results[position]))


option_names = st.text(max_size=20).filter(lambda key: key not in JOB_OPTION_KEYS)


@HOSTILE
@given(key=option_names | st.sampled_from(["Priority", "priority ", "retry_", "TX", "queue",
                                           "max_attempts", "_", "data\x00"]))
def test_an_unknown_option_is_refused_by_name(key: str) -> None:
    error = refused_before_io("add_jobs", queue=QUEUE, jobs=[{"data": 1, key: 1}])
    assert error is not None
    assert_refused(error, f"jobs[0].{key}")


def test_the_oracle_can_disagree_with_the_library() -> None:
    # The expected outcome is computed from the table above: prove it refuses
    # what the hostile strategies are there for, and accepts the edges.
    priority = SLOTS[0]
    for bad in (True, 1.0, math.nan, "1", 2**31, -(2**31), 2**63, None):
        assert priority.refused_as(bad) == "priority"
    assert priority.refused_as(INT32_MAX) is None and priority.refused_as(-INT32_MAX) is None
    factor = next(s for s in SLOTS if s.number)
    assert factor.refused_as(1) is None and factor.expected(1) == 1.0
    assert factor.refused_as(math.nan) == factor.refused_as(False) == "retry.backoff.factor"
    start = next(s for s in SLOTS if s.name == "schedule.start_after_seconds")
    assert start.refused_as(None) == "schedule"
