"""SPEC §10, ``schedule={"start_at": datetime}``: an aware instant on the
database clock (a past one means now), beside start_after_seconds; a naive
datetime is a ValueError naming it, with nothing written."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
import pytest

from portqueue import InvalidArgument, PortQueue, Schedule
from portqueue.tx import from_psycopg
from tests.support.rows import count_jobs, db_now, job_row

Db = psycopg.Connection[Any]


def test_the_job_starts_exactly_at_an_aware_future_instant(pq: PortQueue, db: Db,
                                                           schema: str) -> None:
    start_at = (db_now(db) + timedelta(hours=2, microseconds=123_457)).astimezone(
        ZoneInfo("America/New_York"))
    added = pq.add_job(queue="later", data=1, schedule={"start_at": start_at})
    assert added.start_after == start_at
    assert job_row(db, schema, added.job_id)["start_after"] == start_at
    typed = pq.add_job(queue="later", data=2, schedule=Schedule(start_at=start_at))
    assert job_row(db, schema, typed.job_id)["start_after"] == start_at


def test_a_past_instant_means_now(pq: PortQueue, db: Db, schema: str) -> None:
    added = pq.add_job(queue="now", data=1,
                       schedule={"start_at": datetime(2001, 1, 1, tzinfo=timezone.utc)})
    row = job_row(db, schema, added.job_id)
    assert row["start_after"] == row["created_at"]
    assert pq.get_queue_stats(queue="now").oldest_pending_seconds is not None


def test_start_at_joins_the_callers_transaction(pq: PortQueue, db: Db, schema: str,
                                                pg_dsn: str) -> None:
    start_at = db_now(db) + timedelta(minutes=5)
    with psycopg.connect(pg_dsn) as conn:
        added = pq.add_job(queue="tx", data=1, schedule={"start_at": start_at},
                           tx=from_psycopg(conn))
        assert count_jobs(db, schema) == 0  # not before the caller commits
    assert job_row(db, schema, added.job_id)["start_after"] == start_at


@pytest.mark.parametrize(("schedule", "argument"), [
    ({"start_at": datetime(2030, 1, 1)}, "schedule.start_at"),
    ({"start_at": "2030-01-01T00:00:00+00:00"}, "schedule.start_at"),
    ({"start_at": datetime(2030, 1, 1, tzinfo=timezone.utc), "start_after_seconds": 5},
     "schedule"),
    ({"start_at": datetime(2030, 1, 1, tzinfo=timezone.utc), "cron": "* * * * *"}, "schedule"),
])
def test_bad_start_at_is_refused_with_nothing_written(pq: PortQueue, db: Db, schema: str,
                                                      schedule: Any, argument: str) -> None:
    with pytest.raises(ValueError) as refused:
        pq.add_job(queue="bad", data=1, schedule=schedule)
    assert isinstance(refused.value, InvalidArgument) and refused.value.argument == argument
    assert count_jobs(db, schema) == 0


def test_add_jobs_takes_start_at_per_entry(pq: PortQueue, db: Db, schema: str) -> None:
    start_at = db_now(db) + timedelta(hours=1, microseconds=5)
    results = pq.add_jobs(queue="batch", jobs=[
        {"data": 1},
        {"data": 2, "schedule": {"start_at": start_at}},
        {"data": 3, "schedule": {"start_after_seconds": 60}},
        {"data": 4, "schedule": Schedule(start_at=start_at), "idempotency_key": "k"}])
    rows = [job_row(db, schema, r.job_id) for r in results]
    assert rows[0]["start_after"] == rows[0]["created_at"]
    assert rows[1]["start_after"] == start_at == results[1].start_after
    assert rows[2]["start_after"] == rows[2]["created_at"] + timedelta(seconds=60)
    assert rows[3]["start_after"] == start_at
    # A batch large enough to stream is sent whole when an entry has a start_at.
    many = pq.add_jobs(queue="many", jobs=[{"data": n} for n in range(300)]
                       + [{"data": "last", "schedule": {"start_at": start_at}}])
    assert job_row(db, schema, many[-1].job_id)["start_after"] == start_at
    with pytest.raises(InvalidArgument) as refused:
        pq.add_jobs(queue="batch", jobs=[{"data": 5, "schedule": {"start_at": datetime(2030, 1,
                                                                                       1)}}])
    assert refused.value.argument == "jobs[0].schedule.start_at"
    assert count_jobs(db, schema) == 305


def test_the_async_client_takes_start_at(aclient: Any, db: Db, schema: str) -> None:
    start_at = db_now(db) + timedelta(days=1)
    added = aclient.add_job(queue="async-later", data=1, schedule={"start_at": start_at})
    assert job_row(db, schema, added.job_id)["start_after"] == start_at
