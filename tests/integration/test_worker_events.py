"""SPEC §4 and §4.1, events: ``pq.on(event, callback)`` for job_started,
job_completed, job_failed (once, when the job ends failed, with the error),
job_retrying (per failed attempt that will run again), job_cancelled and
job_progress; callbacks receive the JobSnapshot."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from portqueue import JobSnapshot, JobStatus, PortQueue
from tests.support.waiting import wait_until, wait_until_async
from tests.support.workers import AsyncHarness, SyncHarness, finished_row, row_where

Db = psycopg.Connection[Any]
EVENTS = ("job_started", "job_completed", "job_failed", "job_retrying", "job_cancelled",
          "job_progress")


class Boom(Exception):
    pass


class Recorder:
    """Every event a client's callbacks received, in arrival order."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[tuple[str, JobSnapshot, Any]] = []

    def callback(self, event: str) -> Callable[..., None]:
        def record(snapshot: JobSnapshot, *error: Any) -> None:
            assert isinstance(snapshot, JobSnapshot)
            with self.lock:
                self.calls.append((event, snapshot, error[0] if error else None))
        return record

    def register(self, client: Any) -> None:
        for event in EVENTS:
            client.on(event, self.callback(event))

    def of(self, job_id: str, event: str | None = None) -> list[tuple[str, JobSnapshot, Any]]:
        with self.lock:
            return [c for c in self.calls
                    if c[1].job_id == job_id and (event is None or c[0] == event)]

    def names(self, job_id: str) -> list[str]:
        return sorted(c[0] for c in self.of(job_id))


def test_started_and_completed(harness: SyncHarness, db: Db, schema: str) -> None:
    pq = harness.pq
    recorder = Recorder()
    recorder.register(pq)
    pq.create_queue(queue="events", handler=lambda job: {"done": job.data})
    harness.start()
    job_id = pq.add_job(queue="events", data=1).job_id
    assert job_id
    wait_until(lambda: len(recorder.of(job_id)) == 2, what="two events")
    assert recorder.names(job_id) == ["job_completed", "job_started"]
    (_, started, _), = recorder.of(job_id, "job_started")
    assert started.attempt == 1 and started.started_at is not None
    (_, completed, error), = recorder.of(job_id, "job_completed")
    assert completed.status is JobStatus.COMPLETED and completed.output == {"done": 1}
    assert error is None


def test_retrying_per_failed_attempt_then_failed_once_with_the_error(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    pq = harness.pq
    recorder = Recorder()
    recorder.register(pq)

    @pq.handler("events", retry={"max_attempts": 3})
    def handler(job: Any) -> None:
        raise Boom(f"attempt {job.attempt}")

    harness.start()
    job_id = pq.add_job(queue="events", data={}).job_id
    assert job_id
    wait_until(lambda: recorder.of(job_id, "job_failed"), what="job_failed")
    wait_until(lambda: len(recorder.of(job_id, "job_started")) == 3, what="three starts")
    assert recorder.names(job_id) == (
        ["job_failed"] + ["job_retrying"] * 2 + ["job_started"] * 3)
    retrying = recorder.of(job_id, "job_retrying")
    assert sorted(error["attempt"] for _, _, error in retrying) == [1, 2]
    assert sorted(error["message"] for _, _, error in retrying) == ["attempt 1", "attempt 2"]
    (_, failed, error), = recorder.of(job_id, "job_failed")
    assert failed.status is JobStatus.FAILED and failed.attempt == 3
    assert error["type"] == f"{__name__}.Boom" and error["message"] == "attempt 3"
    assert error["attempt"] == 3 and "Traceback" in error["traceback"]


def test_a_job_that_succeeds_after_a_retry_never_fires_job_failed(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    pq = harness.pq
    recorder = Recorder()
    recorder.register(pq)

    @pq.handler("events", retry={"max_attempts": 2})
    def handler(job: Any) -> str:
        if job.attempt == 1:
            raise Boom("first")
        return "second"

    harness.start()
    job_id = pq.add_job(queue="events", data={}).job_id
    assert job_id
    wait_until(lambda: recorder.of(job_id, "job_completed"), what="job_completed")
    wait_until(lambda: len(recorder.of(job_id)) == 4, what="every event")
    assert recorder.names(job_id) == ["job_completed", "job_retrying", "job_started",
                                      "job_started"]


def test_cancelled_and_progress(harness: SyncHarness, db: Db, schema: str) -> None:
    pq = harness.pq
    recorder = Recorder()
    recorder.register(pq)

    @pq.handler("events")
    def handler(job: Any) -> None:
        job.set_progress(0.4)
        job.set_attrs({"stage": "waiting"})
        job.signal.wait(10)
        if job.data == "raise":
            raise Boom("stopping")

    harness.start()
    for how in ("return", "raise"):
        job_id = pq.add_job(queue="events", data=how).job_id
        assert job_id
        wait_until(lambda: recorder.of(job_id, "job_progress"), what="job_progress")  # noqa: B023
        (_, progressed, _), = recorder.of(job_id, "job_progress")
        assert progressed.progress == 0.4 and progressed.attrs == {"stage": "waiting"}
        pq.cancel_job(job_id=job_id)
        wait_until(lambda: recorder.of(job_id, "job_cancelled"), what="job_cancelled")  # noqa: B023
        (_, cancelled, _), = recorder.of(job_id, "job_cancelled")
        assert cancelled.status is JobStatus.CANCELLED and cancelled.cancel_requested
        row = finished_row(db, schema, job_id)
        assert row is not None and row["status"] == "cancelled"
        assert recorder.names(job_id) == ["job_cancelled", "job_progress", "job_started"]


def test_a_raising_callback_does_not_stop_the_worker(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    pq = harness.pq
    recorder = Recorder()

    def broken(snapshot: JobSnapshot) -> None:
        raise RuntimeError("callback bug")

    pq.on("job_started", broken)
    pq.on("job_completed", broken)
    recorder.register(pq)
    pq.create_queue(queue="events", handler=lambda job: job.data)
    harness.start()
    for n in range(3):
        assert pq.add_job_and_wait(queue="events", data=n, timeout_seconds=5) == n
    # started + completed for each of the 3 jobs, delivered despite the broken callbacks
    wait_until(lambda: len(recorder.calls) == 6, what="both events of every job")
    assert sorted(c[0] for c in recorder.calls) == ["job_completed"] * 3 + ["job_started"] * 3


def test_unknown_event_is_a_value_error(pq: PortQueue) -> None:
    with pytest.raises(ValueError, match="event"):
        pq.on("job_exploded", lambda snapshot: None)
    with pytest.raises(ValueError, match="callback"):
        pq.on("job_started", "not callable")  # type: ignore[arg-type]


async def test_async_client_awaits_async_callbacks(
    aharness: AsyncHarness, db: Db, schema: str
) -> None:
    apq = aharness.apq
    seen: list[tuple[str, str, Any]] = []

    def on(event: str) -> Callable[..., Any]:
        async def callback(snapshot: JobSnapshot, *error: Any) -> None:
            seen.append((event, snapshot.status.value, error[0]["message"] if error else None))
        return callback

    for event in EVENTS:
        apq.on(event, on(event))

    @apq.handler("events", retry={"max_attempts": 2})
    async def handler(job: Any) -> str:
        job.set_progress(0.5)
        if job.data == "fail":
            raise Boom(f"no {job.attempt}")
        return "ok"

    await aharness.start()
    job_id = (await apq.add_job(queue="events", data="fail")).job_id
    assert job_id
    await wait_until_async(lambda: finished_row(db, schema, job_id), what="the failure")
    await wait_until_async(lambda: any(e == "job_failed" for e, _, _ in seen), what="failed")
    assert ("job_failed", "failed", "no 2") in seen
    assert [m for e, _, m in seen if e == "job_retrying"] == ["no 1"]
    assert sum(e == "job_started" for e, _, _ in seen) == 2
    assert not any(e in ("job_completed", "job_cancelled") for e, _, _ in seen)
    assert row_where(db, schema, job_id, "progress = 0.5") is not None


def test_a_slow_callback_does_not_stall_the_worker(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    """Callbacks must not block the loop that claims, heartbeats and completes."""
    pq = harness.pq
    gate = harness.gate()
    called: list[str] = []

    def slow(snapshot: JobSnapshot) -> None:
        if snapshot.data == "slow":
            called.append("slow")
            gate.wait(20)

    pq.on("job_completed", slow)
    pq.create_queue(queue="events", handler=lambda job: job.data, concurrency=2)
    harness.start()
    first = pq.add_job(queue="events", data="slow").job_id
    assert first
    wait_until(lambda: called, what="the slow callback to be running")
    # While it runs, the worker goes on claiming and completing.
    assert pq.add_job_and_wait(queue="events", data="next", timeout_seconds=5) == "next"
    gate.set()
