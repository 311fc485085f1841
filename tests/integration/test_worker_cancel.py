"""SPEC §3.2 and §4.1, cancelling a running job: ``cancel_job`` sets the
handler's signal on whichever worker runs it, through NOTIFY, within a second;
the job ends ``cancelled`` when its handler returns or raises after the signal,
and ``completed`` when it finished its work before the signal reached it.

The lease (60 s) and the poll interval (5 s) are long here, so only the
cancel NOTIFY can explain a signal that arrives within a second."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from portqueue import CancelOutcome, PortQueue
from tests.support.rows import count_rows, job_row
from tests.support.waiting import wait_until, wait_until_async
from tests.support.workers import (
    AsyncHarness,
    SyncHarness,
    active,
    finished_row,
)

Db = psycopg.Connection[Any]
SLOW_POLL = 5.0


class Stopped(Exception):
    pass


@pytest.fixture
def worker(pg_dsn: str, schema: str) -> Iterator[SyncHarness]:
    """A worker in a client of its own: the test's ``pq`` only produces and
    cancels, as another process would."""
    with PortQueue(pg_dsn, schema=schema) as client:
        h = SyncHarness(client)
        yield h
        h.close()


def test_cancel_sets_a_running_handlers_signal_within_a_second(
    worker: SyncHarness, pq: PortQueue, db: Db, schema: str
) -> None:
    noticed: dict[str, Any] = {}
    running = threading.Event()

    @worker.pq.handler("long", retry={"max_attempts": 3})
    def handler(job: Any) -> str:
        noticed["before"] = (job.signal.is_set(), job.signal.wait(0.01))
        running.set()
        noticed["woke"] = job.signal.wait(10)
        noticed["at"] = time.monotonic()
        noticed["reason"] = job.signal.reason
        noticed["is_set"] = job.signal.is_set()
        return "stopped early"

    worker.start(poll_interval=SLOW_POLL)
    job_id = pq.add_job(queue="long", data={}).job_id
    assert job_id
    wait_until(running.is_set, what="the handler to run")
    asked = time.monotonic()
    result = pq.cancel_job(job_id=job_id)
    assert result.outcome is CancelOutcome.SIGNALLED and result.job_id == job_id
    wait_until(lambda: "at" in noticed, timeout=3, what="the handler to see its signal")
    assert noticed["at"] - asked < 1.0, f"signal took {noticed['at'] - asked:.2f}s"
    assert noticed["before"] == (False, False)
    assert noticed["woke"] is True and noticed["is_set"] is True
    assert noticed["reason"] == "cancelled"

    row = wait_until(lambda: finished_row(db, schema, job_id), what="the job to end")
    assert row["status"] == "cancelled" and row["attempt"] == 1, "no retry after a cancel"
    assert row["cancel_requested_at"] is not None and row["output"] == "stopped early"
    assert pq.cancel_job(job_id=job_id).outcome is CancelOutcome.ALREADY_FINISHED


def test_a_handler_raising_after_the_signal_ends_cancelled_not_failed(
    worker: SyncHarness, pq: PortQueue, db: Db, schema: str
) -> None:
    running = threading.Event()

    @worker.pq.handler("long", retry={"max_attempts": 3}, dead_letter_queue="long-dead")
    def handler(job: Any) -> str:
        running.set()
        if job.signal.wait(10):
            raise Stopped("cancelled mid-way")
        return "finished"

    worker.start(poll_interval=SLOW_POLL)
    job_id = pq.add_job(queue="long", data={}).job_id
    assert job_id
    wait_until(running.is_set, what="the handler to run")
    assert pq.cancel_job(job_id=job_id).outcome is CancelOutcome.SIGNALLED
    row = wait_until(lambda: finished_row(db, schema, job_id), what="the job to end")
    assert row["status"] == "cancelled" and row["attempt"] == 1
    assert [e["message"] for e in row["errors"]] == ["cancelled mid-way"]
    assert count_rows(db, schema, "job", "source_job_id = %s", [job_id]) == 0, (
        "a cancelled job is not dead-lettered")


async def test_cancel_reaches_an_async_handler_awaiting_its_signal(
    aharness: AsyncHarness, pq: PortQueue, db: Db, schema: str
) -> None:
    apq = aharness.apq
    noticed: dict[str, Any] = {}
    running: set[str] = set()

    @apq.handler("long")
    async def handler(job: Any) -> str:
        running.add(job.data)
        if job.data == "await-signal":
            await asyncio.wait_for(job.signal, 10)  # the signal itself is awaitable
        else:
            await asyncio.wait_for(job.signal.wait(), 10)
        noticed[job.data] = (time.monotonic(), job.signal.reason, job.signal.is_set())
        return "stopped"

    await aharness.start(poll_interval=SLOW_POLL)
    for how in ("await-wait", "await-signal"):
        job_id = (await apq.add_job(queue="long", data=how)).job_id
        assert job_id
        await wait_until_async(lambda: how in running, what="the handler to run")  # noqa: B023
        asked = time.monotonic()
        assert (await apq.cancel_job(job_id=job_id)).outcome is CancelOutcome.SIGNALLED
        await wait_until_async(lambda: how in noticed, timeout=3, what="the signal")  # noqa: B023
        at, reason, is_set = noticed[how]
        assert at - asked < 1.0 and reason == "cancelled" and is_set
        row = await wait_until_async(lambda: finished_row(db, schema, job_id),  # noqa: B023
                                     what="the job to end")
        assert row["status"] == "cancelled"


def test_a_handler_that_finishes_before_the_signal_reaches_it_ends_completed(
    pg_dsn: str, pq: PortQueue, db: Db, schema: str
) -> None:
    """Under poll_only the cancel travels with the touch (here every 20 s), so
    the handler can finish its work first, deterministically."""
    with PortQueue(pg_dsn, schema=schema, poll_only=True) as client:
        harness = SyncHarness(client)
        gate = harness.gate()
        seen: list[bool] = []
        try:

            @client.handler("quick")
            def handler(job: Any) -> str:
                gate.wait(20)
                seen.append(job.signal.is_set())
                return "all done"

            job_id = pq.add_job(queue="quick", data={}).job_id
            assert job_id
            harness.start(poll_interval=30)  # the first claim is immediate
            wait_until(active(db, schema, job_id), what="the claim")
            assert pq.cancel_job(job_id=job_id).outcome is CancelOutcome.SIGNALLED
            gate.set()
            row = wait_until(lambda: finished_row(db, schema, job_id), what="the job to end")
            assert seen == [False]
            assert row["status"] == "completed" and row["output"] == "all done"
            assert row["cancel_requested_at"] is not None
        finally:
            harness.close()


def test_cancel_of_a_pending_job_means_it_never_runs(
    worker: SyncHarness, pq: PortQueue, db: Db, schema: str
) -> None:
    ran: list[Any] = []
    lock = threading.Lock()

    @worker.pq.handler("maybe")
    def handler(job: Any) -> None:
        with lock:
            ran.append(job.data)

    kept = pq.add_job(queue="maybe", data="kept").job_id
    dropped = pq.add_job(queue="maybe", data="dropped").job_id
    assert kept and dropped
    assert pq.cancel_job(job_id=dropped).outcome is CancelOutcome.CANCELLED
    worker.start()
    wait_until(lambda: finished_row(db, schema, kept), what="the kept job")
    row = job_row(db, schema, dropped)
    assert row["status"] == "cancelled" and row["attempt"] == 0 and row["started_at"] is None
    assert ran == ["kept"]
