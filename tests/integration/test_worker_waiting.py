"""SPEC §3.4 and §4.1, waiting for a result: ``wait_for_job`` returns the
finished snapshot whatever the final status, raises the builtin TimeoutError,
and rejects unknown ids; ``add_job_and_wait`` returns the handler's output or
raises ``JobFailedError`` (with ``.job``) for failed, cancelled and expired.

Waits are woken by the job's finish NOTIFY: a wait that starts before the
finish returns within moments of it, with no poll interval involved."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from portqueue import (
    JobFailedError,
    JobSnapshot,
    JobStatus,
    PortQueue,
)
from tests.support.rows import db_now, fetch_one, update_job
from tests.support.waiting import in_background, wait_until
from tests.support.workers import AsyncHarness, SyncHarness, row_where, wait_gate

Db = psycopg.Connection[Any]
UNKNOWN_ID = "01900000-0000-7000-8000-000000000000"


class Boom(Exception):
    pass


def test_wait_for_job_returns_the_snapshot_whatever_the_final_status(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    pq = harness.pq

    @pq.handler("jobs")
    def handler(job: Any) -> Any:
        if job.data == "fail":
            raise Boom("it failed")
        return {"ok": job.data}

    harness.start()
    completed = pq.add_job(queue="jobs", data="complete").job_id
    failed = pq.add_job(queue="jobs", data="fail").job_id
    cancelled = pq.add_job(queue="idle", data="cancel").job_id
    expired = pq.add_job(queue="jobs", data="expire", expire_in_seconds=60,
                         schedule={"start_after_seconds": 3600}).job_id
    assert completed and failed and cancelled and expired
    pq.cancel_job(job_id=cancelled)
    # Ready now but past its expiry: the next claim marks it expired.
    update_job(db, schema, expired, "start_after = now(), expire_at = now()")
    pq.add_job(queue="jobs", data="wake the claimer")

    expected = {completed: JobStatus.COMPLETED, failed: JobStatus.FAILED,
                cancelled: JobStatus.CANCELLED, expired: JobStatus.EXPIRED}
    for job_id, status in expected.items():
        snapshot = pq.wait_for_job(job_id=job_id, timeout_seconds=5)
        assert isinstance(snapshot, JobSnapshot)
        assert snapshot.job_id == job_id and snapshot.status is status
        assert snapshot.finished_at is not None
    assert pq.wait_for_job(job_id=completed, timeout_seconds=1).output == {"ok": "complete"}
    errors = pq.wait_for_job(job_id=failed, timeout_seconds=1).errors
    assert [(e["type"], e["message"]) for e in errors] == [(f"{__name__}.Boom", "it failed")]


def test_a_wait_started_before_the_finish_is_woken_by_it(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    pq = harness.pq
    gate = harness.gate()
    finished_at: list[float] = []

    @pq.handler("slow")
    def handler(job: Any) -> str:
        gate.wait(20)
        finished_at.append(time.monotonic())
        return "finally"

    harness.start(poll_interval=5)
    job_id = pq.add_job(queue="slow", data={}).job_id
    assert job_id

    def release_once_watched() -> None:
        # wait_for_job asked for a finish notification: now let the job end.
        wait_until(lambda: row_where(db_for_thread, schema, job_id, "notify_finished"),
                   what="the waiter to subscribe")
        gate.set()

    with psycopg.connect(db.info.dsn, autocommit=True) as db_for_thread:
        thread = in_background(release_once_watched)
        snapshot = pq.wait_for_job(job_id=job_id, timeout_seconds=10)
        returned_at = time.monotonic()
        thread.join(5)
    assert snapshot.status is JobStatus.COMPLETED and snapshot.output == "finally"
    assert returned_at - finished_at[0] < 1.0


def test_wait_for_job_times_out_with_the_builtin_timeout_error(
    pq: PortQueue, db: Db, schema: str
) -> None:
    job_id = pq.add_job(queue="nobody-works-here", data={}).job_id
    assert job_id
    began = time.monotonic()
    with pytest.raises(TimeoutError):
        pq.wait_for_job(job_id=job_id, timeout_seconds=0.3)
    assert 0.3 <= time.monotonic() - began < 3
    assert fetch_one(db, schema, "job", "id = %s AND status = 'pending'", [job_id]) is not None


def test_wait_for_an_unknown_job_is_a_value_error(pq: PortQueue) -> None:
    with pytest.raises(ValueError, match="job_id"):
        pq.wait_for_job(job_id=UNKNOWN_ID, timeout_seconds=1)
    with pytest.raises(ValueError, match="job_id"):
        pq.wait_for_job(job_id="not-a-uuid", timeout_seconds=1)
    with pytest.raises(ValueError, match="timeout_seconds"):
        pq.wait_for_job(job_id=UNKNOWN_ID, timeout_seconds=-1)


def test_add_job_and_wait_returns_the_output_or_raises_job_failed(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    pq = harness.pq
    gate = harness.gate()

    @pq.handler("render", concurrency=1)
    def handler(job: Any) -> Any:
        kind = job.data["kind"]
        if kind == "fail":
            raise Boom("render failed")
        if kind == "cancel":
            pq.cancel_job(job_id=job.id)  # cancelled while running, by anyone
            job.signal.wait(5)
            return None
        if kind == "block":
            gate.wait(20)
        return {"rendered": job.data["n"]}

    harness.start()
    assert pq.add_job_and_wait(queue="render", data={"kind": "ok", "n": 3},
                               timeout_seconds=5) == {"rendered": 3}

    with pytest.raises(JobFailedError) as raised:
        pq.add_job_and_wait(queue="render", data={"kind": "fail"}, timeout_seconds=5,
                            retry={"max_attempts": 2})
    job = raised.value.job
    assert job.status is JobStatus.FAILED and job.attempt == 2
    assert [e["message"] for e in job.errors] == ["render failed"] * 2
    assert "render failed" in str(raised.value)

    with pytest.raises(JobFailedError) as raised:
        pq.add_job_and_wait(queue="render", data={"kind": "cancel"}, timeout_seconds=5)
    assert raised.value.job.status is JobStatus.CANCELLED

    # Expired: the only slot is busy until the waited job is past its expiry.
    pq.add_job(queue="render", data={"kind": "block"})

    def release_after_expiry() -> None:
        with psycopg.connect(db.info.dsn, autocommit=True) as conn:
            wait_until(lambda: fetch_one(
                conn, schema, "job", "data ->> 'kind' = 'expiring' AND expire_at < now()"),
                what="the waited job to pass its expiry")
        gate.set()

    thread = in_background(release_after_expiry)
    with pytest.raises(JobFailedError) as raised:
        pq.add_job_and_wait(queue="render", data={"kind": "expiring"}, timeout_seconds=10,
                            expire_in_seconds=1)
    thread.join(5)
    assert raised.value.job.status is JobStatus.EXPIRED and raised.value.job.attempt == 0
    assert raised.value.job.expire_at is not None
    assert raised.value.job.expire_at <= db_now(db)


def test_add_job_and_wait_times_out(pq: PortQueue, db: Db, schema: str) -> None:
    with pytest.raises(TimeoutError):
        pq.add_job_and_wait(queue="unserved", data={"n": 1}, timeout_seconds=0.2)
    row = fetch_one(db, schema, "job", "queue = 'unserved'")
    assert row is not None and row["status"] == "pending", "the job was added all the same"


async def test_async_waits(aharness: AsyncHarness, db: Db, schema: str) -> None:
    apq = aharness.apq
    gate = aharness.gate()

    @apq.handler("render")
    async def handler(job: Any) -> Any:
        if job.data == "fail":
            raise Boom("async failure")
        if job.data == "block":
            await wait_gate(gate)
        return {"echo": job.data}

    await aharness.start()
    assert await apq.add_job_and_wait(queue="render", data="x", timeout_seconds=5) == {
        "echo": "x"}
    with pytest.raises(JobFailedError) as raised:
        await apq.add_job_and_wait(queue="render", data="fail", timeout_seconds=5)
    assert raised.value.job.status is JobStatus.FAILED
    assert raised.value.job.errors[0]["message"] == "async failure"

    blocked = (await apq.add_job(queue="render", data="block")).job_id
    assert blocked
    with pytest.raises(TimeoutError):
        await apq.wait_for_job(job_id=blocked, timeout_seconds=0.2)
    gate.set()
    snapshot = await apq.wait_for_job(job_id=blocked, timeout_seconds=5)
    assert snapshot.status is JobStatus.COMPLETED and snapshot.output == {"echo": "block"}
    with pytest.raises(ValueError, match="job_id"):
        await apq.wait_for_job(job_id=UNKNOWN_ID, timeout_seconds=1)
