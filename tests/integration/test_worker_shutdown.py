"""SPEC §4, shutdown: ``stop()`` stops claiming and waits for in-flight
handlers (up to grace_seconds); ``stop(abort=True)`` sets every handler's
signal and releases unfinished jobs to pending at once, without spending an
attempt; jobs completed before the stop are never run again."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg import sql

from portqueue import AsyncPortQueue
from tests.support.rows import job_row
from tests.support.waiting import wait_until, wait_until_async
from tests.support.workers import AsyncHarness, SyncHarness, active, finished_row, row_where

Db = psycopg.Connection[Any]


class Boom(Exception):
    pass


def stopping(client: Any) -> Callable[[], bool]:
    """True once the client's worker has begun stopping (its claims are over).
    Read before stop() is called: the client forgets its worker as stop begins."""
    worker = client._host.worker
    return lambda: worker.stopping()


def test_stop_waits_for_in_flight_handlers(harness: SyncHarness, db: Db, schema: str) -> None:
    pq = harness.pq
    gate = harness.gate()
    signals: list[bool] = []
    handler_returned: list[float] = []

    @pq.handler("drain", concurrency=2)
    def handler(job: Any) -> str:
        if job.data == "long":
            gate.wait(20)
        signals.append(job.signal.is_set())
        handler_returned.append(time.monotonic())
        return f"{job.data} done"

    harness.start()
    long = pq.add_job(queue="drain", data="long").job_id
    assert long
    wait_until(active(db, schema, long), what="the long job to run")
    has_begun = stopping(pq)
    stop_returned: list[float] = []
    stopper = threading.Thread(target=lambda: (pq.stop(), stop_returned.append(time.monotonic())))  # type: ignore[func-returns-value]
    stopper.start()
    wait_until(has_begun, what="stop() to begin")
    # Draining: no more claims, though a slot is free.
    late = pq.add_job(queue="drain", data="late").job_id
    assert late
    assert stopper.is_alive() and not stop_returned, "stop() is waiting for the handler"
    gate.set()
    stopper.join(10)
    assert stop_returned and handler_returned[0] <= stop_returned[0]
    assert signals == [False], "a graceful stop does not signal handlers"
    row = job_row(db, schema, long)
    assert row["status"] == "completed" and row["output"] == "long done"
    assert job_row(db, schema, late)["status"] == "pending", "nothing claimed while draining"


def test_a_drain_past_grace_seconds_releases_the_job(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    pq = harness.pq
    gate = harness.gate()

    @pq.handler("drain")
    def handler(job: Any) -> None:
        gate.wait(20)  # never heeds anything

    harness.start(grace_seconds=0.5)
    job_id = pq.add_job(queue="drain", data={}).job_id
    assert job_id
    wait_until(active(db, schema, job_id), what="the claim")
    began = time.monotonic()
    pq.stop()
    assert 0.5 <= time.monotonic() - began < 5
    row = job_row(db, schema, job_id)
    assert row["status"] == "pending" and row["attempt"] == 0 and row["started_at"] is None


def test_abort_signals_releases_without_spending_an_attempt_and_never_reruns_finished_jobs(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    pq = harness.pq
    gate = harness.gate()
    lock = threading.Lock()
    runs: Counter[str] = Counter()
    reasons: dict[str, str | None] = {}

    @pq.handler("work", concurrency=5, retry={"max_attempts": 3})
    def handler(job: Any) -> str:
        name = job.data
        with lock:
            runs[name] += 1
            first_run = runs[name] == 1
        if name == "retried" and job.attempt == 1:
            raise Boom("first attempt fails")
        if name == "retried":
            first_run = job.attempt == 2 and runs[name] == 2
        if first_run and name in ("ignores", "heeds", "retried"):
            if name == "heeds":
                job.signal.wait(20)
            else:
                gate.wait(20)  # ignores its signal
            reasons[name] = job.signal.reason
        return f"{name} ok"

    harness.start(grace_seconds=30)
    ids = {name: pq.add_job(queue="work", data=name).job_id
           for name in ("done-1", "done-2", "ignores", "heeds", "retried")}
    for name in ("done-1", "done-2"):
        wait_until(lambda: finished_row(db, schema, ids[name]), what=name)  # noqa: B023
    for name in ("ignores", "heeds"):
        wait_until(active(db, schema, ids[name]), what=name)
    wait_until(lambda: row_where(db, schema, ids["retried"], "status = 'active' AND attempt = 2"),
               what="the retried job's second attempt")

    began = time.monotonic()
    pq.stop(abort=True)
    assert time.monotonic() - began < 5, "abort does not wait for handlers (grace is 30 s)"
    wait_until(lambda: "heeds" in reasons, what="the heeding handler to see its signal")
    assert reasons["heeds"] == "shutdown"
    for name, attempt in (("ignores", 0), ("heeds", 0), ("retried", 1)):
        row = job_row(db, schema, ids[name])
        assert row["status"] == "pending", name
        assert row["attempt"] == attempt, f"{name}: the aborted attempt was given back"
        assert row["started_at"] is None and row["lease_expires_at"] is None
        assert row["worker_id"] is None and row["output"] is None
    assert len(job_row(db, schema, ids["retried"])["errors"]) == 1

    # The handlers that ignored their signal return now; their results are refused.
    gate.set()
    wait_until(lambda: len(reasons) == 3, what="every stuck handler to return")
    assert reasons["ignores"] == "shutdown" and reasons["retried"] == "shutdown"
    for name in ("ignores", "heeds", "retried"):
        assert job_row(db, schema, ids[name])["status"] == "pending"

    # A new worker runs the released jobs; the finished ones are not run again.
    harness.start()
    for name, job_id in ids.items():
        row = wait_until(lambda: finished_row(db, schema, job_id), what=name)  # noqa: B023
        assert row["status"] == "completed" and row["output"] == f"{name} ok", name
    assert runs == {"done-1": 1, "done-2": 1, "ignores": 2, "heeds": 2, "retried": 3}
    assert job_row(db, schema, ids["ignores"])["attempt"] == 1
    assert job_row(db, schema, ids["retried"])["attempt"] == 2


async def test_async_stop_drains_and_abort_releases(
    aharness: AsyncHarness, db: Db, schema: str
) -> None:
    apq = aharness.apq
    gate = aharness.gate()
    reasons: dict[str, str | None] = {}

    @apq.handler("work", concurrency=3)
    async def handler(job: Any) -> str:
        if job.data == "heeds":
            await asyncio.wait_for(job.signal.wait(), 20)
        elif job.data == "drained":
            await asyncio.wait_for(gate.wait(), 20)
        reasons[job.data] = job.signal.reason
        return f"{job.data} ok"

    # Graceful: the in-flight handler finishes and completes its job.
    await aharness.start()
    drained = (await apq.add_job(queue="work", data="drained")).job_id
    assert drained
    await wait_until_async(active(db, schema, drained), what="the claim")
    has_begun = stopping(apq)
    stop = asyncio.ensure_future(apq.stop())
    await wait_until_async(has_begun, what="stop() to begin")
    assert not stop.done()
    gate.set()
    await asyncio.wait_for(stop, 10)
    row = job_row(db, schema, drained)
    assert row["status"] == "completed" and reasons["drained"] is None

    # Abort: the heeding handler's signal is set and its job released.
    await aharness.start(grace_seconds=30)
    heeds = (await apq.add_job(queue="work", data="heeds")).job_id
    assert heeds
    await wait_until_async(active(db, schema, heeds), what="the claim")
    began = time.monotonic()
    await apq.stop(abort=True)
    assert time.monotonic() - began < 5
    await wait_until_async(lambda: "heeds" in reasons, what="the signal")
    assert reasons["heeds"] == "shutdown"
    row = job_row(db, schema, heeds)
    assert row["status"] == "pending" and row["attempt"] == 0 and row["output"] is None


def claim_waiting_on_lock(db: Db) -> bool:
    row = db.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND application_name = 'portqueue:fetcher' AND wait_event_type = 'Lock'").fetchone()
    return row is not None and row[0] > 0


@pytest.mark.parametrize("abort", [False, True])
def test_a_claim_in_flight_when_stop_begins_is_not_left_active(
    harness: SyncHarness, pg_dsn: str, db: Db, schema: str, abort: bool
) -> None:
    """The claim statement commits after stop() began: its jobs are run and
    completed (drain) or released (abort), never left active until their
    lease lapses."""
    pq = harness.pq
    ran: list[str] = []
    pq.create_queue(queue="racy", handler=lambda job: ran.append(job.id) or "ran")  # type: ignore[func-returns-value]
    job_id = pq.add_job(queue="racy", data={}).job_id
    assert job_id
    with psycopg.connect(pg_dsn) as blocker:
        # Hold the claim back: its row locks wait behind this table lock.
        blocker.execute(sql.SQL("LOCK TABLE {} IN EXCLUSIVE MODE").format(
            sql.Identifier(schema, "job")))
        harness.start()
        wait_until(lambda: claim_waiting_on_lock(db), what="the claim to wait on the lock")
        has_begun = stopping(pq)
        stopper = threading.Thread(target=lambda: pq.stop(abort=abort))
        stopper.start()
        wait_until(has_begun, what="stop() to begin")
        blocker.commit()  # the claim goes through now
    stopper.join(15)
    assert not stopper.is_alive()
    row = job_row(db, schema, job_id)
    if abort:
        assert row["status"] == "pending" and row["attempt"] == 0
    else:
        assert row["status"] == "completed" and ran == [job_id]


async def test_a_worker_stopped_right_after_start_leaves_no_session_open(
    apq_factory: Callable[..., AsyncPortQueue], db: Db
) -> None:
    """stop() cancels the listener and heartbeat loops, possibly while they
    connect: what a connect opens is closed then, not left to the garbage
    collector (which is off here, so a leaked session would stay)."""
    pauses = [0, 0, 0.001, 0.003, 0.005, 0.01] * 4

    def sessions() -> list[tuple[int, str]]:
        rows = db.execute(
            "SELECT pid, application_name FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name LIKE 'stop-test:%%'"
        ).fetchall()
        return [(row[0], row[1]) for row in rows]

    gc.disable()
    try:
        for round_, pause in enumerate(pauses):
            apq = apq_factory(application_name="stop-test")

            @apq.handler("leak")
            async def handler(job: Any) -> None:
                pass

            await apq.start()
            await asyncio.sleep(pause)
            await apq.stop(abort=bool(round_ % 2))
            await apq.aclose()
            # A closed session leaves pg_stat_activity a moment after its client.
            await wait_until_async(lambda: not sessions(), what=f"no session left, round {round_}")
    finally:
        gc.enable()


async def test_a_stopped_worker_closes_its_heartbeat_session(
    apq_factory: Callable[..., AsyncPortQueue], db: Db
) -> None:
    """The heartbeat's connection (the claim session, which it shares) is closed
    by stop(), not left to the garbage collector (off here)."""
    def heartbeats() -> list[int]:
        rows = db.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = 'beat-test:fetcher'").fetchall()
        return [row[0] for row in rows]

    gc.disable()
    try:
        apq = apq_factory(application_name="beat-test")

        @apq.handler("beat", lease_seconds=1)
        async def handler(job: Any) -> None:
            pass

        await apq.start()
        await wait_until_async(heartbeats, what="the heartbeat's session")
        await apq.stop()
        await apq.aclose()
        await wait_until_async(lambda: not heartbeats(), what="the heartbeat's session to end")
    finally:
        gc.enable()
