"""SPEC §4 and §4.1, the handler's context: the job's fields, progress and
attrs on the row, and ``job.transaction()`` (the handler's writes and the
completion commit together, or not at all, and never after a lost lease).

Sync handlers run on PortQueue's worker thread pool; async handlers on the
test's loop with AsyncPortQueue. Rows are read back with SQL."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.support.activity import handler_connections
from tests.support.rows import job_row, update_job
from tests.support.waiting import wait_until, wait_until_async
from tests.support.workers import (
    AsyncHarness,
    SyncHarness,
    finished_row,
    handler_transactions_in_progress,
    handler_transactions_open,
    row_where,
    wait_for_worker_threads_to_end,
    wait_gate,
)

Db = psycopg.Connection[Any]


class Boom(Exception):
    pass


INSERT_EFFECT = "INSERT INTO public.worker_effects VALUES (%s, %s)"


def effect_notes(db: Db, job_id: str) -> list[str]:
    rows = db.execute("SELECT note FROM public.worker_effects WHERE job_id = %s ORDER BY note",
                      [job_id]).fetchall()
    return [row[0] for row in rows]


def written_together(db: Db, schema: str, job_id: str) -> bool:
    """The handler's effect row and the job's completion share one transaction id."""
    effect = db.execute("SELECT xmin::text FROM public.worker_effects WHERE job_id = %s",
                        [job_id]).fetchone()
    job = db.execute(sql.SQL("SELECT xmin::text FROM {} WHERE id = %s").format(
        sql.Identifier(schema, "job")), [job_id]).fetchone()
    assert effect is not None and job is not None
    return bool(effect[0] == job[0])


# --- the job's fields ---


def test_a_sync_handler_sees_the_jobs_fields(harness: SyncHarness, db: Db, schema: str) -> None:
    pq = harness.pq
    seen: dict[str, Any] = {}

    @pq.handler("fields", retry={"max_attempts": 3})
    def handler(job: Any) -> None:
        seen.update(data=job.data, id=job.id, attempt=job.attempt,
                    max_attempts=job.max_attempts, queue=job.queue, group_id=job.group_id)
        if job.attempt == 1:
            raise Boom("once more")

    harness.start()
    job_id = pq.add_job(queue="fields", data={"to": ["a", 1, None]}, group_id="batch-7").job_id
    assert job_id
    wait_until(lambda: finished_row(db, schema, job_id), what="the job")
    assert seen == {"data": {"to": ["a", 1, None]}, "id": job_id, "attempt": 2,
                    "max_attempts": 3, "queue": "fields", "group_id": "batch-7"}


async def test_an_async_handler_sees_the_jobs_fields(
    aharness: AsyncHarness, db: Db, schema: str
) -> None:
    apq = aharness.apq
    seen: dict[str, Any] = {}

    @apq.handler("fields")
    async def handler(job: Any) -> None:
        seen.update(data=job.data, id=job.id, attempt=job.attempt,
                    max_attempts=job.max_attempts, queue=job.queue, group_id=job.group_id)

    await aharness.start()
    job_id = (await apq.add_job(queue="fields", data="plain", retry={"max_attempts": 4})).job_id
    assert job_id
    await wait_until_async(lambda: finished_row(db, schema, job_id), what="the job")
    assert seen == {"data": "plain", "id": job_id, "attempt": 1, "max_attempts": 4,
                    "queue": "fields", "group_id": None}


# --- progress and attrs ---


def test_progress_and_attrs_land_on_the_row_while_running(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    pq = harness.pq
    first, second = harness.gate(), harness.gate()
    problems: list[str] = []

    @pq.handler("reporting")
    def handler(job: Any) -> str:
        for bad in (1.5, -0.1, float("nan"), True, "half"):
            try:
                job.set_progress(bad)
            except ValueError as exc:
                problems.append(str(exc).split(":")[0])
        try:
            job.set_attrs(["not", "a", "dict"])
        except ValueError as exc:
            problems.append(str(exc).split(":")[0])
        job.set_progress(0.25)
        job.set_attrs({"step": "render", "pages": 1})
        job.set_attrs({"pages": 2})  # merged with the pending report
        first.wait(20)
        job.set_progress(0.75)
        job.set_attrs({"step": "upload"})  # merged with what the row holds
        second.wait(20)
        return "done"

    harness.start()
    job_id = pq.add_job(queue="reporting", data={}).job_id
    assert job_id
    # A touch may take the progress before the attrs that follow it (set_progress
    # wakes the heartbeat): wait for both, each written by some touch.
    row = wait_until(lambda: row_where(
        db, schema, job_id, """progress = 0.25 AND attrs = '{"step": "render", "pages": 2}'"""),
        what="the first progress and attrs")
    assert row["status"] == "active"
    assert problems == ["progress"] * 5 + ["attrs"]
    first.set()
    row = wait_until(lambda: row_where(
        db, schema, job_id, """progress = 0.75 AND attrs = '{"step": "upload", "pages": 2}'"""),
        what="the second progress and attrs")
    assert row["status"] == "active"
    second.set()
    row = wait_until(lambda: finished_row(db, schema, job_id), what="the job to finish")
    assert row["status"] == "completed" and row["progress"] == 0.75
    assert row["attrs"] == {"step": "upload", "pages": 2}


async def test_async_progress_and_attrs_land_on_the_row_while_running(
    aharness: AsyncHarness, db: Db, schema: str
) -> None:
    apq = aharness.apq
    gate = aharness.gate()

    @apq.handler("reporting")
    async def handler(job: Any) -> None:
        job.set_progress(0.5)
        job.set_attrs({"phase": "a"})
        job.set_attrs({"count": 3})
        with pytest.raises(ValueError, match="progress"):
            job.set_progress(1.5)
        await wait_gate(gate)

    await aharness.start()
    job_id = (await apq.add_job(queue="reporting", data={})).job_id
    assert job_id
    row = await wait_until_async(lambda: row_where(db, schema, job_id, "progress = 0.5"),
                                 what="the progress")
    assert row["status"] == "active" and row["attrs"] == {"phase": "a", "count": 3}
    gate.set()
    row = await wait_until_async(lambda: finished_row(db, schema, job_id), what="the finish")
    assert row["status"] == "completed" and row["errors"] == []


@pytest.mark.parametrize("outcome", ["return", "raise"])
def test_progress_and_attrs_of_a_job_that_finishes_at_once_are_kept(
    harness: SyncHarness, db: Db, schema: str, outcome: str
) -> None:
    pq = harness.pq

    @pq.handler("fast")
    def handler(job: Any) -> str:
        job.set_progress(1)
        job.set_attrs({"fast": True})
        if outcome == "raise":
            raise Boom("after reporting")
        return "done"

    harness.start()
    job_id = pq.add_job(queue="fast", data={}).job_id
    assert job_id
    row = wait_until(lambda: finished_row(db, schema, job_id), what="the fast job")
    assert row["status"] == ("completed" if outcome == "return" else "failed")
    assert row["progress"] == 1.0 and row["attrs"] == {"fast": True}


async def test_progress_of_an_async_job_that_finishes_at_once_is_kept(
    aharness: AsyncHarness, db: Db, schema: str
) -> None:
    apq = aharness.apq

    @apq.handler("fast")
    async def handler(job: Any) -> None:
        job.set_progress(0.9)
        job.set_attrs({"fast": "yes"})

    await aharness.start()
    job_id = (await apq.add_job(queue="fast", data={})).job_id
    assert job_id
    row = await wait_until_async(lambda: finished_row(db, schema, job_id), what="the job")
    assert row["progress"] == 0.9 and row["attrs"] == {"fast": "yes"}


# --- job.transaction() ---


def test_transaction_commits_the_handlers_write_with_the_completion(
    harness: SyncHarness, db: Db, schema: str, effects: str
) -> None:
    pq = harness.pq
    gate = harness.gate()

    @pq.handler("tx")
    def handler(job: Any) -> dict[str, int]:
        with job.transaction() as conn:
            assert isinstance(conn, psycopg.Connection)
            conn.execute(INSERT_EFFECT, [job.id, "written"])
        gate.wait(20)  # after the block, before returning: nothing is committed yet
        return {"rows": 1}

    harness.start()
    job_id = pq.add_job(queue="tx", data={}).job_id
    assert job_id
    wait_until(lambda: handler_transactions_open(db) == 1, what="the handler's write")
    assert effect_notes(db, job_id) == [], "not visible before the completion"
    assert job_row(db, schema, job_id)["status"] == "active"
    gate.set()
    row = wait_until(lambda: finished_row(db, schema, job_id), what="the completion")
    assert row["status"] == "completed" and row["output"] == {"rows": 1}
    assert effect_notes(db, job_id) == ["written"]
    # One transaction wrote both rows.
    assert written_together(db, schema, job_id)


async def test_async_transaction_commits_the_handlers_write_with_the_completion(
    aharness: AsyncHarness, db: Db, schema: str, effects: str
) -> None:
    apq = aharness.apq

    @apq.handler("tx")
    async def handler(job: Any) -> str:
        async with job.transaction() as conn:
            assert isinstance(conn, psycopg.AsyncConnection)
            await conn.execute(INSERT_EFFECT, [job.id, "async"])
        return "ok"

    await aharness.start()
    job_id = (await apq.add_job(queue="tx", data={})).job_id
    assert job_id
    row = await wait_until_async(lambda: finished_row(db, schema, job_id), what="completion")
    assert row["status"] == "completed" and row["output"] == "ok"
    assert effect_notes(db, job_id) == ["async"]
    assert written_together(db, schema, job_id)


@pytest.mark.parametrize("where", ["inside", "after"])
def test_a_handler_raising_rolls_back_its_transaction(
    harness: SyncHarness, db: Db, schema: str, effects: str, where: str
) -> None:
    pq = harness.pq

    @pq.handler("tx", retry={"max_attempts": 2})
    def handler(job: Any) -> str:
        with job.transaction() as conn:
            conn.execute(INSERT_EFFECT, [job.id, f"attempt {job.attempt}"])
            if job.attempt == 1 and where == "inside":
                raise Boom("inside the block")
        if job.attempt == 1:
            raise Boom("after the block")
        return "second"

    harness.start()
    job_id = pq.add_job(queue="tx", data={}).job_id
    assert job_id
    row = wait_until(lambda: finished_row(db, schema, job_id), what="the retried job")
    assert row["status"] == "completed" and row["output"] == "second"
    assert [e["message"] for e in row["errors"]] == [f"{where} the block"]
    assert effect_notes(db, job_id) == ["attempt 2"], "the failed attempt's write is gone"


async def test_an_async_handler_raising_after_its_transaction_rolls_it_back(
    aharness: AsyncHarness, db: Db, schema: str, effects: str
) -> None:
    apq = aharness.apq

    @apq.handler("tx")
    async def handler(job: Any) -> str:
        async with job.transaction() as conn:
            await conn.execute(INSERT_EFFECT, [job.id, "doomed"])
        raise Boom("after the block")

    await aharness.start()
    job_id = (await apq.add_job(queue="tx", data={})).job_id
    assert job_id
    row = await wait_until_async(lambda: finished_row(db, schema, job_id), what="the failure")
    assert row["status"] == "failed" and row["errors"][0]["message"] == "after the block"
    assert effect_notes(db, job_id) == []


def test_unserialisable_output_rolls_back_the_transaction(
    harness: SyncHarness, db: Db, schema: str, effects: str
) -> None:
    pq = harness.pq

    @pq.handler("tx")
    def handler(job: Any) -> Any:
        with job.transaction() as conn:
            conn.execute(INSERT_EFFECT, [job.id, "doomed"])
        return object()

    harness.start()
    job_id = pq.add_job(queue="tx", data={}).job_id
    assert job_id
    row = wait_until(lambda: finished_row(db, schema, job_id), what="the failure")
    assert row["status"] == "failed" and row["errors"][0]["message"].startswith("output:")
    assert effect_notes(db, job_id) == []


def test_lost_lease_refuses_the_completion_and_sets_the_signal(
    harness: SyncHarness, db: Db, schema: str, effects: str
) -> None:
    pq = harness.pq
    reasons: list[str | None] = []
    returned = threading.Event()

    @pq.handler("leased", lease_seconds=1)
    def handler(job: Any) -> str:
        with job.transaction() as conn:
            conn.execute(INSERT_EFFECT, [job.id, "zombie"])
        job.signal.wait(10)
        reasons.append(job.signal.reason)
        job.set_progress(0.5)  # a zombie's report never reaches the row
        job.set_attrs({"zombie": True})
        returned.set()
        return "zombie"

    harness.start()
    job_id = pq.add_job(queue="leased", data={}).job_id
    assert job_id
    wait_until(lambda: row_where(db, schema, job_id, "status = 'active'"), what="the claim")
    # Another worker took the job over: the lease token moved on.
    update_job(db, schema, job_id, "lease_token = lease_token + 1")
    wait_until(returned.is_set, timeout=3, what="the heartbeat to notice the lost lease")
    assert reasons == ["lease_lost"]
    wait_until(lambda: handler_transactions_open(db) == 0, what="the zombie's tx to end")
    row = job_row(db, schema, job_id)
    assert row["status"] == "active" and row["output"] is None and row["finished_at"] is None
    assert row["progress"] is None and row["attrs"] == {}
    assert effect_notes(db, job_id) == [], "the zombie's write never committed"


async def test_async_lost_lease_refuses_the_completion_and_sets_the_signal(
    aharness: AsyncHarness, db: Db, schema: str, effects: str
) -> None:
    apq = aharness.apq
    reasons: list[str | None] = []

    @apq.handler("leased", lease_seconds=1)
    async def handler(job: Any) -> str:
        async with job.transaction() as conn:
            await conn.execute(INSERT_EFFECT, [job.id, "zombie"])
        await asyncio.wait_for(job.signal.wait(), 10)
        reasons.append(job.signal.reason)
        return "zombie"

    await aharness.start()
    job_id = (await apq.add_job(queue="leased", data={})).job_id
    assert job_id
    await wait_until_async(lambda: row_where(db, schema, job_id, "status = 'active'"),
                           what="the claim")
    update_job(db, schema, job_id, "lease_token = lease_token + 1")
    await wait_until_async(lambda: reasons, timeout=3, what="the lost lease to be noticed")
    assert reasons == ["lease_lost"]
    # In progress, not only idle in transaction: the fixture dropping the
    # effects table runs with this loop stopped, so a completion still being
    # written (then rolled back) would hold its lock until the DROP times out.
    await wait_until_async(lambda: handler_transactions_in_progress(db) == 0,
                           what="the tx to end")
    row = job_row(db, schema, job_id)
    assert row["status"] == "active" and row["output"] is None
    assert effect_notes(db, job_id) == []


def test_many_handlers_opening_their_first_transaction_at_once(
    harness: SyncHarness, db: Db, schema: str, effects: str
) -> None:
    """The handlers' pool is created on first use, from several threads at once."""
    pq = harness.pq
    barrier = threading.Barrier(6, timeout=10)

    @pq.handler("tx", concurrency=6)
    def handler(job: Any) -> int:
        barrier.wait()
        with job.transaction() as conn:
            conn.execute(INSERT_EFFECT, [job.id, "once"])
        return int(job.data)

    harness.start()
    ids = [r.job_id for r in pq.add_jobs(queue="tx", jobs=[{"data": n} for n in range(6)])]
    for job_id in ids:
        assert job_id
        row = wait_until(lambda: finished_row(db, schema, job_id), what="a job")  # noqa: B023
        assert row["status"] == "completed", row["errors"]
        assert effect_notes(db, job_id) == ["once"]
    pq.stop()
    wait_for_worker_threads_to_end()  # a leaked handler pool would keep its threads
    # A backend leaves pg_stat_activity a moment after its client hangs up;
    # a leaked pool's connections would stay for good.
    wait_until(lambda: handler_connections(db) == 0, what="every handler connection to close")


async def test_many_async_handlers_opening_their_first_transaction_at_once(
    aharness: AsyncHarness, db: Db, schema: str, effects: str
) -> None:
    apq = aharness.apq
    arrived = 0
    everyone = asyncio.Event()

    @apq.handler("tx", concurrency=6)
    async def handler(job: Any) -> int:
        nonlocal arrived
        arrived += 1
        if arrived == 6:
            everyone.set()
        await asyncio.wait_for(everyone.wait(), 10)
        async with job.transaction() as conn:
            await conn.execute(INSERT_EFFECT, [job.id, "once"])
        return int(job.data)

    await aharness.start()
    ids = [r.job_id for r in await apq.add_jobs(queue="tx", jobs=[
        {"data": n} for n in range(6)])]
    for job_id in ids:
        assert job_id
        row = await wait_until_async(lambda: finished_row(db, schema, job_id),  # noqa: B023
                                     what="a job")
        assert row["status"] == "completed", row["errors"]
        assert effect_notes(db, job_id) == ["once"]
    await apq.stop()
    await wait_until_async(lambda: handler_connections(db) == 0,
                           what="every handler connection to close")
