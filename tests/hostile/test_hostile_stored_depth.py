"""JSON nested deeper than Python can decode, written by SQL (issue 16, item 8's
family). The client refuses more than MAX_PAYLOAD_DEPTH levels at add, and a
handler's output past it fails the job, but PostgreSQL's jsonb takes 10,000
levels and more, and any other writer (SQL, a trigger, another language) can
store them. Python's decoder gives up a little under its recursion limit.

Such a row must not crash what reads it: a worker fails the job (no retry: the
row would read the same at every attempt) and goes on, a pull consumer's fetch
fails that job and hands out the others, a parent's output that deep fails the
child that would receive it, and a read answers a ValueError naming the column.
Nothing is lost: every job reaches a terminal state.
"""

from __future__ import annotations

import functools
from typing import Any

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st
from psycopg import sql

from portqueue import AsyncJob, InvalidArgument, Job, PortQueue
from portqueue.validation import MAX_PAYLOAD_DEPTH
from tests.hostile.support import HOSTILE
from tests.support.waiting import wait_until, wait_until_async
from tests.support.workers import AsyncHarness, SyncHarness

QUEUE = "deep"
# Past what json.loads follows at any stack depth; well inside what jsonb takes.
DEEP = 5_000
Db = psycopg.Connection[Any]


def nested_text(depth: int) -> str:
    return "[" * depth + "]" * depth


def nested_objects(depth: int) -> str:
    return '{"a":' * (depth - 1) + "{}" + "}" * (depth - 1)


def insert_deep(db: Db, schema: str, depth: int = DEEP, *, queue: str = QUEUE,
                max_attempts: int = 3) -> str:
    """A pending job whose data is ``depth`` nested arrays, written by SQL."""
    row = db.execute(sql.SQL(
        "INSERT INTO {} (id, queue, data, max_attempts) "
        "VALUES (gen_random_uuid(), %s, %s::jsonb, %s) RETURNING id::text",
    ).format(sql.Identifier(schema, "job")), [queue, nested_text(depth), max_attempts]).fetchone()
    assert row is not None
    return str(row[0])


def outcome(db: Db, schema: str, job_id: str) -> tuple[str, int, str | None] | None:
    """(status, attempt, error) once the job has finished (the deep column is
    not read: psycopg would decode it)."""
    row = db.execute(sql.SQL(
        "SELECT status::text, attempt, error FROM {} WHERE id = %s AND finished_at IS NOT NULL",
    ).format(sql.Identifier(schema, "job")), [job_id]).fetchone()
    return None if row is None else (row[0], row[1], row[2])


def assert_failed_unreadable(db: Db, schema: str, job_id: str, column: str) -> None:
    status, attempt, error = wait_until(lambda: outcome(db, schema, job_id), 20,
                                        f"job {job_id} to finish")
    assert (status, attempt) == ("failed", 1), (status, attempt, error)
    assert error is not None and error.startswith(f"{column}: is nested"), error
    assert "too deep for Python to decode" in error, error


def test_a_sync_worker_fails_a_job_too_deep_to_decode_and_goes_on(
    harness: SyncHarness, db: Db, schema: str,
) -> None:
    pq = harness.pq
    ran: list[Any] = []

    def handler(job: Job) -> None:
        ran.append(job.data)

    pq.create_queue(queue=QUEUE, handler=handler, concurrency=2,
                    retry={"max_attempts": 3})
    deep = insert_deep(db, schema)
    plain = pq.add_job(queue=QUEUE, data={"n": 1}).job_id
    harness.start()
    assert_failed_unreadable(db, schema, deep, "data")
    wait_until(lambda: outcome(db, schema, plain), 20, "the plain job")
    # The worker still runs jobs, with both of its slots.
    later = [r.job_id for r in pq.add_jobs(queue=QUEUE, jobs=[{"data": {"n": 2}}] * 4)]
    wait_until(lambda: all(outcome(db, schema, j) == ("completed", 1, None) for j in later), 20,
               "jobs added after it")
    assert sorted(d["n"] for d in ran) == [1, 2, 2, 2, 2]


async def test_an_async_worker_fails_a_job_too_deep_to_decode_and_goes_on(
    aharness: AsyncHarness, db: Db, schema: str,
) -> None:
    apq = aharness.apq

    async def handler(job: AsyncJob) -> dict[str, Any]:
        return {"seen": job.data}

    apq.create_queue(queue=QUEUE, handler=handler, concurrency=1, retry={"max_attempts": 3})
    deep = insert_deep(db, schema)
    await aharness.start()
    await wait_until_async(lambda: outcome(db, schema, deep), 20, "the deep job")
    assert_failed_unreadable(db, schema, deep, "data")
    # Its only slot was given back.
    plain = (await apq.add_job(queue=QUEUE, data={"n": 1})).job_id
    await wait_until_async(lambda: outcome(db, schema, plain) == ("completed", 1, None), 20,
                           "a job after it")


def test_a_parent_output_too_deep_to_decode_fails_the_child(
    harness: SyncHarness, db: Db, schema: str,
) -> None:
    pq = harness.pq
    pq.create_queue(queue=QUEUE, handler=lambda job: job.parent_outputs)
    parent = pq.add_job(queue="parents", data={}).job_id
    child = pq.add_job(queue=QUEUE, data={}, depends_on=[parent]).job_id
    assert parent is not None and child is not None
    # The parent finishes by SQL with an output no client could have written.
    db.execute(sql.SQL(
        "UPDATE {} SET status = 'completed', finished_at = now(), output = %s::jsonb "
        "WHERE id = %s").format(sql.Identifier(schema, "job")), [nested_text(DEEP), parent])
    harness.start()
    assert_failed_unreadable(db, schema, child, "parent_outputs")


def test_a_fetch_fails_the_job_too_deep_to_decode_and_hands_out_the_others(
    pq: PortQueue, db: Db, schema: str,
) -> None:
    before = pq.add_job(queue=QUEUE, data={"n": 1}).job_id
    deep = insert_deep(db, schema)
    after = pq.add_job(queue=QUEUE, data={"n": 2}).job_id
    fetched = pq.fetch_jobs(queue=QUEUE, limit=10)
    assert {job.job_id for job in fetched} == {before, after}
    assert {job.job_id: job.data["n"] for job in fetched} == {before: 1, after: 2}
    assert_failed_unreadable(db, schema, deep, "data")
    assert pq.fetch_jobs(queue=QUEUE, limit=10) == []


def test_a_fetch_of_only_jobs_too_deep_to_decode_returns_none(
    pq: PortQueue, db: Db, schema: str,
) -> None:
    deep = [insert_deep(db, schema) for _ in range(2)]
    assert pq.fetch_jobs(queue=QUEUE, limit=10) == []
    for job_id in deep:
        assert_failed_unreadable(db, schema, job_id, "data")


def test_reads_of_a_row_too_deep_to_decode_name_the_column(
    pq: PortQueue, db: Db, schema: str,
) -> None:
    deep = insert_deep(db, schema)
    with pytest.raises(InvalidArgument) as refused:
        pq.get_job(job_id=deep)
    assert refused.value.argument == "data", refused.value
    assert f"{DEEP} arrays/objects deep" in str(refused.value)


# What a writer other than the client may store: any depth jsonb takes. Read
# back, it is either exactly what was written or a ValueError naming the
# column, never a RecursionError.
@HOSTILE
@given(depth=st.one_of(st.integers(1, 3 * MAX_PAYLOAD_DEPTH),
                       st.integers(800, 1_200), st.integers(1_200, 9_000)),
       kind=st.sampled_from(["[]", "{}"]))
def test_any_depth_sql_stores_reads_back_or_names_the_column(
    pq: PortQueue, db: Db, schema: str, depth: int, kind: str,
) -> None:
    text = nested_text(depth) if kind == "[]" else nested_objects(depth)
    job_id = db.execute(sql.SQL(
        "INSERT INTO {} (id, queue, data) VALUES (gen_random_uuid(), %s, %s::jsonb) "
        "RETURNING id::text").format(sql.Identifier(schema, "job")), [QUEUE, text]).fetchone()
    assert job_id is not None
    try:
        job = pq.get_job(job_id=job_id[0])
    except InvalidArgument as exc:
        assert exc.argument == "data", exc
        assert depth > MAX_PAYLOAD_DEPTH
        return
    assert job is not None
    value, levels = job.data, 0
    while value:
        value = value[0] if kind == "[]" else value["a"]
        levels += 1
    assert levels + 1 == depth and value in ([], {})


def test_a_handler_output_too_deep_is_a_recorded_failure(
    harness: SyncHarness, db: Db, schema: str,
) -> None:
    def handler(job: Job) -> Any:
        value: list[Any] = []
        for _ in range(job.data["depth"]):
            value = [value]
        return value

    harness.pq.create_queue(queue=QUEUE, handler=handler, retry={"max_attempts": 1})
    ids = [harness.pq.add_job(queue=QUEUE, data={"depth": depth}).job_id
           for depth in (MAX_PAYLOAD_DEPTH + 1, DEEP, 10_000)]
    harness.start()
    for job_id in ids:
        assert job_id is not None
        finished = functools.partial(outcome, db, schema, job_id)
        status, _, error = wait_until(finished, 20, "the job")
        assert status == "failed" and error is not None and error.startswith("output: "), error

