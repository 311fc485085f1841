"""Issue 18 item 14, the events operators ask for: ``job_rescued`` fires on the
worker whose maintenance took back a lapsed lease (with the job's snapshot, as
it was rescued), and a pending job cancelled with ``cancel_job`` fires
``job_cancelled`` once, on the client that cancelled it.

Lapsed leases are arranged with SQL (what a killed worker leaves behind); the
rescue is done by a real worker's maintenance."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import psycopg

from portqueue import CancelOutcome, JobSnapshot, JobStatus, PortQueue
from portqueue.tx import from_psycopg
from tests.support.rows import make_active, update_job
from tests.support.waiting import wait_until, wait_until_async
from tests.support.workers import AsyncHarness, SyncHarness, row_where

Db = psycopg.Connection[Any]

LAPSE = "lease_expires_at = now() - interval '1 second', worker_id = gen_random_uuid()"


class Seen:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.snapshots: list[JobSnapshot] = []

    def __call__(self, snapshot: JobSnapshot) -> None:
        with self.lock:
            self.snapshots.append(snapshot)

    def of(self, job_id: str) -> list[JobSnapshot]:
        with self.lock:
            return [s for s in self.snapshots if s.job_id == job_id]


def lapsed_job(pq: PortQueue, db: Db, schema: str, queue: str, max_attempts: int) -> str:
    job_id = pq.add_job(queue=queue, data="left behind",
                        retry={"max_attempts": max_attempts}).job_id
    assert job_id
    make_active(db, schema, job_id)
    update_job(db, schema, job_id, LAPSE)
    return job_id


def test_a_rescued_lease_fires_job_rescued_with_the_snapshot(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    pq = harness.pq
    rescued, failed = Seen(), Seen()
    pq.on("job_rescued", rescued)
    pq.on("job_failed", lambda snapshot, error: failed(snapshot))
    # On a queue this worker does not handle, so the rescued jobs stay put.
    retried = lapsed_job(pq, db, schema, "abandoned", max_attempts=3)
    spent = lapsed_job(pq, db, schema, "abandoned", max_attempts=1)
    pq.create_queue(queue="other", handler=lambda job: None)
    harness.start(maintenance=True)

    (snapshot,) = wait_until(lambda: rescued.of(retried), what="job_rescued for the job")
    assert snapshot.status is JobStatus.PENDING and snapshot.attempt == 1
    assert [e["type"] for e in snapshot.errors] == ["LeaseExpired"]
    (snapshot,) = wait_until(lambda: rescued.of(spent), what="job_rescued for the spent job")
    assert snapshot.status is JobStatus.FAILED, "attempts spent: rescued to failed"
    assert row_where(db, schema, retried, "status = 'pending'") is not None
    assert failed.of(spent) == [], "job_failed stays the running worker's event"


def test_no_rescue_no_job_rescued(harness: SyncHarness, db: Db, schema: str) -> None:
    pq = harness.pq
    rescued = Seen()
    pq.on("job_rescued", rescued)
    pq.create_queue(queue="work", handler=lambda job: "done")
    harness.start(maintenance=True)
    job_id = pq.add_job(queue="work", data=1).job_id
    assert job_id
    wait_until(lambda: row_where(db, schema, job_id, "status = 'completed'"),
               what="the job to complete")
    assert rescued.of(job_id) == [], "a live lease is never rescued"


def test_a_cancelled_pending_job_fires_job_cancelled_once(pq: PortQueue, db: Db,
                                                          schema: str) -> None:
    cancelled = Seen()
    pq.on("job_cancelled", cancelled)
    job_id = pq.add_job(queue="later", data="never run").job_id
    assert job_id
    assert pq.cancel_job(job_id=job_id).outcome is CancelOutcome.CANCELLED
    (snapshot,) = cancelled.of(job_id)
    assert snapshot.status is JobStatus.CANCELLED and snapshot.finished_at is not None
    # Cancelling it again changes nothing and fires nothing.
    assert pq.cancel_job(job_id=job_id).outcome is CancelOutcome.ALREADY_FINISHED
    assert len(cancelled.of(job_id)) == 1


def test_a_cancel_in_the_callers_transaction_fires_nothing(pq: PortQueue, db: Db,
                                                           pg_dsn: str, schema: str) -> None:
    """The client never sees the caller's commit, so it cannot report it."""
    cancelled = Seen()
    pq.on("job_cancelled", cancelled)
    job_id = pq.add_job(queue="later", data="never run").job_id
    assert job_id
    with psycopg.connect(pg_dsn) as conn:
        result = pq.cancel_job(job_id=job_id, tx=from_psycopg(conn))
        assert result.outcome is CancelOutcome.CANCELLED
        conn.rollback()
    assert cancelled.of(job_id) == []
    assert row_where(db, schema, job_id, "status = 'pending'") is not None


def test_a_callback_that_raises_does_not_fail_the_cancel(pq: PortQueue) -> None:
    def broken(snapshot: JobSnapshot) -> None:
        raise RuntimeError("callback bug")

    cancelled = Seen()
    pq.on("job_cancelled", broken)
    pq.on("job_cancelled", cancelled)
    job_id = pq.add_job(queue="later", data=1).job_id
    assert job_id
    assert pq.cancel_job(job_id=job_id).outcome is CancelOutcome.CANCELLED
    assert len(cancelled.of(job_id)) == 1, "the next callback still runs"


async def test_the_async_client_awaits_its_cancel_callbacks(aharness: AsyncHarness) -> None:
    apq = aharness.apq
    seen: list[str] = []

    def on(label: str) -> Callable[[JobSnapshot], Any]:
        async def callback(snapshot: JobSnapshot) -> None:
            seen.append(f"{label}:{snapshot.status.value}")
        return callback

    apq.on("job_cancelled", on("async"))
    apq.on("job_cancelled", lambda snapshot: seen.append(f"sync:{snapshot.status.value}"))
    job_id = (await apq.add_job(queue="later", data=1)).job_id
    assert job_id
    assert (await apq.cancel_job(job_id=job_id)).outcome is CancelOutcome.CANCELLED
    await wait_until_async(lambda: len(seen) == 2, what="both callbacks")
    assert seen == ["async:cancelled", "sync:cancelled"]
