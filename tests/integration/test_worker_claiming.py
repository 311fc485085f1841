"""SPEC §4, claiming: order, delays, pause, instance keys, expiry, the attempt
counted at claim, the concurrency limit, and batch claims.

Each test produces with the client, lets a real worker claim from PostgreSQL,
and checks what the handlers saw and what the rows say."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

from portqueue import PauseMode, PortQueue
from tests.support.rows import db_now, job_row, update_job
from tests.support.waiting import wait_until, wait_until_async
from tests.support.workers import (
    AsyncHarness,
    SyncHarness,
    finished_row,
    row_where,
    status,
    wait_for_worker_threads_to_end,
)

Db = psycopg.Connection[Any]


def all_finished(db: Db, schema: str, job_ids: list[str]) -> bool:
    return all(finished_row(db, schema, job_id) for job_id in job_ids)


def test_claim_order_is_priority_then_start_after_then_insertion(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    pq = harness.pq
    order: list[str] = []

    @pq.handler("ordered", concurrency=1)
    def record(job: Any) -> None:
        order.append(job.data["name"])

    names = ["late", "old-first", "urgent-late", "old-second", "urgent-early", "mid"]
    priorities = {"urgent-late": 5, "urgent-early": 5}
    added = pq.add_jobs(queue="ordered", jobs=[
        {"data": {"name": name}, "priority": priorities.get(name, 0)} for name in names])
    ids = {name: result.job_id for name, result in zip(names, added, strict=True)}
    # Readiness times on the database clock; the two "old" jobs share one
    # instant, so insertion order alone separates them.
    ages = {"late": 1, "old-first": 20, "old-second": 20, "urgent-late": 1,
            "urgent-early": 5, "mid": 10}
    db.execute(sql.SQL(
        "UPDATE {} AS j SET start_after = now() - make_interval(secs => a.age) "
        "FROM unnest(%s::uuid[], %s::int[]) AS a (id, age) WHERE j.id = a.id"
    ).format(sql.Identifier(schema, "job")), [[ids[n] for n in names], [ages[n] for n in names]])

    harness.start()
    wait_until(lambda: len(order) == len(names), what="every ordered job to run")
    assert order == ["urgent-early", "urgent-late", "old-first", "old-second", "mid", "late"]


def test_a_delayed_job_does_not_start_before_start_after(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    pq = harness.pq
    pq.create_queue(queue="later", handler=lambda job: job.data)
    delayed = pq.add_job(queue="later", data="delayed", schedule={"start_after_seconds": 1})
    now_job = pq.add_job(queue="later", data="now").job_id
    assert delayed.job_id and now_job
    harness.start(poll_interval=0.05)

    wait_until(lambda: finished_row(db, schema, now_job), what="the undelayed job")
    # The worker is claiming (and polling every 50 ms); the delayed job waits
    # for its start_after on the database clock.
    early = job_row(db, schema, delayed.job_id)
    if db_now(db) < early["start_after"]:
        assert early["status"] == "pending" and early["attempt"] == 0
    done = wait_until(lambda: finished_row(db, schema, delayed.job_id), timeout=5,
                      what="the delayed job")
    assert done["status"] == "completed" and done["output"] == "delayed"
    assert done["started_at"] >= done["start_after"] == delayed.start_after


def test_paused_queue_is_not_claimed_until_resumed(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    pq = harness.pq
    pq.create_queue(queue="held", handler=lambda job: "ran")
    pq.create_queue(queue="witness", handler=lambda job: "ran")
    pq.pause_queue(queue="held", mode=PauseMode.PROCESSING)
    held = pq.add_job(queue="held", data={}).job_id
    assert held
    harness.start(poll_interval=0.05)
    # Many claims go by (a witness queue's jobs run, polls every 50 ms)...
    for _ in range(5):
        witness = pq.add_job(queue="witness", data={}).job_id
        assert witness
        wait_until(lambda: finished_row(db, schema, witness), what="a witness job")  # noqa: B023
    row = job_row(db, schema, held)
    assert row["status"] == "pending" and row["attempt"] == 0, "a paused queue is not claimed"

    pq.resume_queue(queue="held")
    done = wait_until(lambda: finished_row(db, schema, held), what="the resumed job")
    assert done["status"] == "completed" and done["attempt"] == 1


def test_preferred_instance_key_pattern_picks_the_worker(
    pq: PortQueue, pg_dsn: str, db: Db, schema: str
) -> None:
    ran_by: dict[str, str] = {}
    lock = threading.Lock()

    def handler_for(label: str) -> Callable[[Any], None]:
        def handler(job: Any) -> None:
            with lock:
                ran_by[job.data["name"]] = label
        return handler

    gpu = PortQueue(pg_dsn, schema=schema, instance_key="gpu-box-a100")
    harnesses = [SyncHarness(pq), SyncHarness(gpu)]
    try:
        pq.create_queue(queue="render", handler=handler_for("ram"))
        gpu.create_queue(queue="render", handler=handler_for("gpu"))
        jobs = {}
        for n in range(4):
            jobs[f"gpu-{n}"] = pq.add_job(queue="render", data={"name": f"gpu-{n}"},
                                          preferred_instance_key_pattern="^gpu-.*a100").job_id
            jobs[f"ram-{n}"] = pq.add_job(queue="render", data={"name": f"ram-{n}"},
                                          preferred_instance_key_pattern="ram-8gb").job_id
        nobody = pq.add_job(queue="render", data={"name": "nobody"},
                            preferred_instance_key_pattern="ram-8GB").job_id  # case-sensitive
        for h in harnesses:
            h.start(poll_interval=0.05)
        wait_until(lambda: len(ran_by) == 8, what="every matching job to run")
        assert {name: label for name, label in ran_by.items()} == {
            name: name.split("-")[0] for name in jobs}
        assert nobody and status(db, schema, nobody) == "pending"
        assert job_row(db, schema, nobody)["attempt"] == 0
    finally:
        for h in harnesses:
            h.close(check_threads=False)
        gpu.close()
        wait_for_worker_threads_to_end()


def test_an_expired_job_is_marked_expired_and_never_started(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    pq = harness.pq
    started: list[Any] = []

    @pq.handler("perishable")
    def handler(job: Any) -> None:
        started.append(job.data)

    stale = pq.add_job(queue="perishable", data="stale", expire_in_seconds=60).job_id
    fresh = pq.add_job(queue="perishable", data="fresh", expire_in_seconds=60).job_id
    assert stale and fresh
    update_job(db, schema, stale, "expire_at = now() - interval '1 second'")
    harness.start()

    wait_until(lambda: finished_row(db, schema, fresh), what="the fresh job")
    row = wait_until(lambda: finished_row(db, schema, stale), what="the stale job to expire")
    assert row["status"] == "expired"
    assert row["attempt"] == 0 and row["started_at"] is None and row["output"] is None
    assert started == ["fresh"], "the expired job's handler never ran"


def test_the_attempt_is_counted_at_claim(harness: SyncHarness, db: Db, schema: str) -> None:
    pq = harness.pq
    gate = harness.gate()
    seen: list[int] = []

    @pq.handler("counted", retry={"max_attempts": 3})
    def handler(job: Any) -> None:
        seen.append(job.attempt)
        gate.wait(20)

    job_id = pq.add_job(queue="counted", data={}).job_id
    assert job_id
    assert job_row(db, schema, job_id)["attempt"] == 0
    harness.start()
    # While the handler is still running, the row already counts the attempt.
    row = wait_until(lambda: row_where(db, schema, job_id, "status = 'active'"),
                     what="the job to be claimed")
    assert row["attempt"] == 1 and row["started_at"] is not None
    assert row["lease_token"] is not None and row["lease_expires_at"] > row["started_at"]
    gate.set()
    done = wait_until(lambda: finished_row(db, schema, job_id), what="the job to finish")
    assert done["status"] == "completed" and done["attempt"] == 1 and seen == [1]


def test_concurrency_never_exceeds_the_limit_sync(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    pq = harness.pq
    lock = threading.Lock()
    running = 0
    peak = 0
    finished = 0

    @pq.handler("bounded", concurrency=3)
    def handler(job: Any) -> None:
        nonlocal running, peak, finished
        with lock:
            running += 1
            peak = max(peak, running)
        job.signal.wait(0.02)  # the job's work
        with lock:
            running -= 1
            finished += 1

    pq.add_jobs(queue="bounded", jobs=[{"data": n} for n in range(30)])
    harness.start()
    wait_until(lambda: finished == 30, timeout=15, what="30 jobs to run")
    assert peak == 3, f"peak concurrency {peak}, limit 3"


async def test_concurrency_never_exceeds_the_limit_async(
    aharness: AsyncHarness, db: Db, schema: str
) -> None:
    apq = aharness.apq
    running = 0
    peak = 0
    finished = 0

    @apq.handler("bounded", concurrency=3)
    async def handler(job: Any) -> None:
        nonlocal running, peak, finished
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.02)  # the job's work
        running -= 1
        finished += 1

    await apq.add_jobs(queue="bounded", jobs=[{"data": n} for n in range(30)])
    await aharness.start()
    await wait_until_async(lambda: finished == 30, timeout=15, what="30 jobs to run")
    assert peak == 3, f"peak concurrency {peak}, limit 3"


def test_start_concurrency_overrides_every_queue(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    pq = harness.pq
    gate = harness.gate()
    lock = threading.Lock()
    running: set[int] = set()

    @pq.handler("wide", concurrency=10)
    def handler(job: Any) -> None:
        with lock:
            running.add(job.data)
        gate.wait(20)

    ids = [r.job_id for r in pq.add_jobs(queue="wide", jobs=[{"data": n} for n in range(5)])]
    harness.start(concurrency=2)
    wait_until(lambda: len(running) == 2, what="two jobs to run")
    # Other jobs stay pending while the two hold their slots.
    assert sum(status(db, schema, job_id) == "active" for job_id in ids if job_id) == 2
    gate.set()
    wait_until(lambda: all_finished(db, schema, [i for i in ids if i]), what="all jobs")


def test_a_claim_fills_the_free_slots_in_one_statement(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    pq = harness.pq
    gate = harness.gate()
    seen: list[str] = []

    @pq.handler("batched", concurrency=5)
    def handler(job: Any) -> None:
        seen.append(job.id)
        gate.wait(20)

    ids = [r.job_id for r in pq.add_jobs(queue="batched", jobs=[{"data": n} for n in range(8)])]
    harness.start()
    wait_until(lambda: len(seen) == 5, what="five jobs to start")
    rows = [job_row(db, schema, job_id) for job_id in ids if job_id]
    active = [row for row in rows if row["status"] == "active"]
    assert len(active) == 5
    # now() is the statement's transaction time: one claim statement gave
    # every row the same started_at and the same lease expiry.
    assert len({row["started_at"] for row in active}) == 1
    assert len({row["lease_expires_at"] for row in active}) == 1
    # Priority and insertion order: the first five added were taken.
    assert [row["id"] for row in active] == [row["id"] for row in rows[:5]]
    gate.set()
    wait_until(lambda: all_finished(db, schema, [i for i in ids if i]), what="every job")


def test_one_claim_statement_serves_every_queue(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    pq = harness.pq
    gate = harness.gate()
    seen: list[str] = []
    lock = threading.Lock()

    def handler(job: Any) -> None:
        with lock:
            seen.append(job.id)
        gate.wait(20)

    pq.create_queue(queue="left", handler=handler, concurrency=2)
    pq.create_queue(queue="right", handler=handler, concurrency=3)
    ids = [r.job_id for r in pq.add_jobs(queue="left", jobs=[{"data": n} for n in range(4)])]
    ids += [r.job_id for r in pq.add_jobs(queue="right", jobs=[{"data": n} for n in range(4)])]
    harness.start()
    wait_until(lambda: len(seen) == 5, what="five jobs to start")
    active = [job_row(db, schema, i) for i in ids if i]
    active = [row for row in active if row["status"] == "active"]
    assert sorted(row["queue"] for row in active) == ["left"] * 2 + ["right"] * 3
    assert len({row["started_at"] for row in active}) == 1, "one statement claimed them all"
    gate.set()
    wait_until(lambda: all_finished(db, schema, [i for i in ids if i]), what="every job")
