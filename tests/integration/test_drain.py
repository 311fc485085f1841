"""SPEC §10, ``drain()``: every ready job of the queues runs in the caller,
jobs they add included, until none is ready; with_scheduled also runs delayed
jobs and pending retries; retries, transactions, pause and timeouts as in a
worker; both clients."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import psycopg
import pytest

from portqueue import DrainResult, InvalidArgument, PauseMode, PortQueue
from tests.support.rows import count_jobs, job_row, update_job

Db = psycopg.Connection[Any]


def test_drain_runs_every_ready_job_and_the_jobs_they_add(pq: PortQueue, db: Db,
                                                          schema: str) -> None:
    @pq.task(queue="chain")
    def chain(n: int) -> int:
        if n < 5:
            chain.add(n=n + 1)
        return n

    @pq.task(queue="other")
    def other() -> None: ...

    chain.add(n=1)
    other.add()
    assert pq.drain() == DrainResult(completed=6)
    assert count_jobs(db, schema, "status = 'completed'") == 6
    assert pq.drain() == DrainResult()  # nothing left


def test_drain_takes_only_the_queues_given(pq: PortQueue, db: Db, schema: str) -> None:
    pq.create_queue(queue="a", handler=lambda job: None)
    pq.create_queue(queue="b", handler=lambda job: None)
    pq.add_job(queue="a", data=1)
    b = pq.add_job(queue="b", data=1).job_id
    assert pq.drain(queues=["a"]).completed == 1
    assert job_row(db, schema, b)["status"] == "pending"
    with pytest.raises(InvalidArgument) as refused:
        pq.drain(queues=["nope"])
    assert refused.value.argument == "queues"


def test_drain_without_handlers_is_refused(pq: PortQueue) -> None:
    with pytest.raises(InvalidArgument) as refused:
        pq.drain()
    assert refused.value.argument == "queues"
    for bad, argument in (({"timeout_seconds": 0}, "timeout_seconds"),
                          ({"with_scheduled": "yes"}, "with_scheduled")):
        pq.create_queue(queue=f"q-{argument}", handler=lambda job: None)
        with pytest.raises(InvalidArgument) as refused:
            pq.drain(**bad)
        assert refused.value.argument == argument


def test_retries_run_in_the_same_drain_when_due_and_with_scheduled_when_delayed(
        pq: PortQueue, db: Db, schema: str) -> None:
    @pq.handler("flaky", retry={"max_attempts": 3})
    def flaky(job: Any) -> str:
        if job.attempt < 3:
            raise RuntimeError(f"attempt {job.attempt}")
        return "third time"

    @pq.handler("slow-retry", retry={"max_attempts": 2, "delay_seconds": 3600})
    def slow_retry(job: Any) -> None:
        raise RuntimeError("always")

    flaky_id = pq.add_job(queue="flaky", data=1).job_id
    slow_id = pq.add_job(queue="slow-retry", data=1).job_id
    delayed = pq.add_job(queue="flaky", data=2, schedule={"start_after_seconds": 3600}).job_id
    assert pq.drain() == DrainResult(completed=1, retried=3)
    assert job_row(db, schema, flaky_id)["output"] == "third time"
    assert job_row(db, schema, slow_id)["status"] == "pending"
    assert job_row(db, schema, delayed)["status"] == "pending"
    assert pq.drain(with_scheduled=True) == DrainResult(completed=1, failed=1, retried=2)
    assert job_row(db, schema, slow_id)["status"] == "failed"
    assert job_row(db, schema, delayed)["status"] == "completed"


def test_job_transaction_commits_with_the_completion(pq: PortQueue, db: Db, schema: str) -> None:
    db.execute("CREATE TABLE IF NOT EXISTS public.drain_effects (n int)")
    db.execute("TRUNCATE public.drain_effects")

    @pq.handler("effects")
    def effects(job: Any) -> str:
        with job.transaction() as conn:
            conn.execute("INSERT INTO public.drain_effects VALUES (%s)", [job.data])
            if job.data == 2:
                raise RuntimeError("rolled back")
        return "written"

    ok = pq.add_job(queue="effects", data=1).job_id
    bad = pq.add_job(queue="effects", data=2).job_id
    assert pq.drain() == DrainResult(completed=1, failed=1)
    assert [r[0] for r in db.execute("SELECT n FROM public.drain_effects")] == [1]
    assert job_row(db, schema, ok)["output"] == "written"
    assert job_row(db, schema, bad)["status"] == "failed"
    db.execute("DROP TABLE public.drain_effects")


def test_a_paused_queue_is_not_drained(pq: PortQueue, db: Db, schema: str) -> None:
    pq.create_queue(queue="paused", handler=lambda job: None)
    job_id = pq.add_job(queue="paused", data=1).job_id
    pq.pause_queue(queue="paused", mode=PauseMode.PROCESSING)
    assert pq.drain() == DrainResult()
    pq.resume_queue(queue="paused")
    assert pq.drain().completed == 1
    assert job_row(db, schema, job_id)["status"] == "completed"


def test_a_drain_past_its_timeout_raises_and_releases_the_running_job(
        pq: PortQueue, db: Db, schema: str) -> None:
    stuck = threading.Event()

    @pq.handler("stuck")
    def handler(job: Any) -> None:
        stuck.wait(10)

    job_id = pq.add_job(queue="stuck", data=1).job_id
    try:
        with pytest.raises(TimeoutError):
            pq.drain(timeout_seconds=0.5)
    finally:
        stuck.set()
    row = job_row(db, schema, job_id)
    assert (row["status"], row["attempt"]) == ("pending", 0)


def test_the_async_client_drains_on_the_callers_loop(apq_factory: Any, db: Db,
                                                     schema: str) -> None:
    async def scenario() -> DrainResult:
        async with apq_factory() as apq:
            loop = asyncio.get_running_loop()
            loops: list[Any] = []

            @apq.task(queue="async-chain")
            async def chain(n: int) -> None:
                loops.append(asyncio.get_running_loop())
                if n < 3:
                    await chain.add(n=n + 1)

            await chain.add(n=1)
            result = await apq.drain()
            assert loops == [loop] * 3
            return result

    assert asyncio.run(scenario()) == DrainResult(completed=3)
    assert count_jobs(db, schema, "status = 'completed'") == 3


def test_the_sync_client_drains_from_inside_a_running_loop(pq: PortQueue) -> None:
    pq.create_queue(queue="from-loop", handler=lambda job: job.data)
    pq.add_job(queue="from-loop", data=1)

    async def inside() -> DrainResult:
        return pq.drain()

    assert asyncio.run(inside()).completed == 1


def test_a_drained_run_whose_lease_was_taken_writes_nothing(pq: PortQueue, db: Db,
                                                            schema: str) -> None:
    @pq.handler("zombie")
    def zombie(job: Any) -> str:
        # Another claim superseded this run while it ran (a rescue, a new claim).
        update_job(db, schema, job.id, "lease_token = lease_token + 1")
        return "late"

    job_id = pq.add_job(queue="zombie", data=1).job_id
    assert pq.drain() == DrainResult()
    row = job_row(db, schema, job_id)
    assert (row["status"], row["output"]) == ("active", None)
