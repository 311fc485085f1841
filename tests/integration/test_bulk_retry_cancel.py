"""SPEC §10, bulk: ``retry_jobs`` and ``cancel_jobs`` act on many jobs in one
statement, by id or by queue and statuses, and say how many they acted on.
Active jobs are never re-armed by a retry; a cancel signals them as
``cancel_job`` does. Rows are arranged and read with plain SQL."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

from portqueue import CancelCounts, JobSnapshot, JobStatus, PortQueue
from tests.support.refusals import assert_refused_writing_nothing
from tests.support.rows import count_jobs, finish, job_row, make_active
from tests.support.waiting import wait_until
from tests.support.workers import SyncHarness, finished_row

Db = psycopg.Connection[Any]
UNKNOWN = "0192f3e4-0000-7000-8000-00000000abcd"


def _jobs(client: PortQueue, db: Db, schema: str, queue: str = "bulk") -> dict[str, str]:
    """One job per status, by status (the waiting one depends on the active one)."""
    ids: dict[str, str] = {}
    for status in JobStatus:
        depends_on = [ids["active"]] if status is JobStatus.WAITING else None
        job_id = client.add_job(queue=queue, data=status.value, depends_on=depends_on).job_id
        assert job_id is not None
        if status is JobStatus.ACTIVE:
            make_active(db, schema, job_id)
        elif status not in (JobStatus.PENDING, JobStatus.WAITING):
            finish(db, schema, job_id, status.value)
        ids[status.value] = job_id
    return ids


def test_retry_jobs_by_id_rearms_settled_jobs_and_never_an_active_one(
    client: PortQueue, db: Db, schema: str
) -> None:
    ids = _jobs(client, db, schema)
    assert client.retry_jobs(job_ids=[*ids.values(), UNKNOWN]) == 4
    for status, job_id in ids.items():
        row = job_row(db, schema, job_id)
        expected = status if status in ("active", "waiting") else "pending"
        assert row["status"] == expected, status
    active = job_row(db, schema, ids["active"])
    assert active["lease_token"] == 1 and active["lease_expires_at"] is not None
    rearmed = job_row(db, schema, ids["failed"])
    assert (rearmed["attempt"], rearmed["finished_at"], rearmed["output"]) == (0, None, None)


def test_retry_jobs_by_status_counts_only_what_matches(
    client: PortQueue, db: Db, schema: str
) -> None:
    ids = _jobs(client, db, schema)
    other = _jobs(client, db, schema, queue="elsewhere")
    assert client.retry_jobs(queue="bulk", statuses=[JobStatus.FAILED, JobStatus.EXPIRED]) == 2
    assert job_row(db, schema, ids["failed"])["status"] == "pending"
    assert job_row(db, schema, ids["completed"])["status"] == "completed"
    assert job_row(db, schema, other["failed"])["status"] == "failed", "another queue's"
    assert client.retry_jobs(queue="bulk", statuses=[]) == 0


def test_retry_jobs_rearms_one_job_per_singleton_key(
    client: PortQueue, db: Db, schema: str
) -> None:
    first = client.add_job(queue="bulk", data=1, singleton_key="k").job_id
    assert first is not None
    finish(db, schema, first, "failed")
    second = client.add_job(queue="bulk", data=2, singleton_key="k").job_id
    assert second is not None
    finish(db, schema, second, "failed")
    assert client.retry_jobs(queue="bulk", statuses=[JobStatus.FAILED]) == 1
    assert job_row(db, schema, second)["status"] == "pending", "the newest of the key"
    assert job_row(db, schema, first)["status"] == "failed"
    assert client.retry_jobs(job_ids=[first]) == 0, "while another live job holds the key"


def test_cancel_jobs_cancels_pending_and_signals_active_ones(
    client: PortQueue, db: Db, schema: str
) -> None:
    ids = _jobs(client, db, schema)
    counts = client.cancel_jobs(job_ids=[*ids.values(), UNKNOWN, ids["pending"]])
    assert isinstance(counts, CancelCounts)
    assert counts == 3, "the jobs acted on: pending and waiting cancelled, one signalled"
    assert (counts.cancelled, counts.signalled, counts.already_finished, counts.not_found) == (
        2, 1, 4, 1)
    assert job_row(db, schema, ids["waiting"])["status"] == "cancelled"
    assert job_row(db, schema, ids["pending"])["status"] == "cancelled"
    active = job_row(db, schema, ids["active"])
    assert active["status"] == "active" and active["cancel_requested_at"] is not None
    assert job_row(db, schema, ids["failed"])["status"] == "failed"


def test_cancel_jobs_by_status_and_its_callbacks(
    client: PortQueue, db: Db, schema: str
) -> None:
    cancelled: list[JobSnapshot] = []
    client.on("job_cancelled", cancelled.append)
    pending = [client.add_job(queue="bulk", data=n).job_id for n in range(3)]
    running = client.add_job(queue="bulk", data="running").job_id
    assert running is not None
    make_active(db, schema, running)

    counts = client.cancel_jobs(queue="bulk", statuses=[JobStatus.PENDING])
    assert (counts, counts.cancelled, counts.signalled) == (3, 3, 0)
    assert sorted(s.job_id for s in cancelled) == sorted(pending)
    assert all(s.status is JobStatus.CANCELLED for s in cancelled)

    counts = client.cancel_jobs(queue="bulk", statuses=[JobStatus.PENDING, JobStatus.ACTIVE])
    assert (counts, counts.signalled) == (1, 1)
    assert len(cancelled) == 3, "a signalled job fires no job_cancelled until it ends"
    assert count_jobs(db, schema, "queue = 'bulk' AND status = 'cancelled'") == 3


@pytest.mark.parametrize(("method", "arguments", "argument"), [
    ("retry_jobs", {}, "job_ids"),
    ("retry_jobs", {"job_ids": [UNKNOWN], "queue": "bulk"}, "job_ids"),
    ("retry_jobs", {"job_ids": "not-a-list"}, "job_ids"),
    ("retry_jobs", {"job_ids": ["nope"]}, "job_ids"),
    ("retry_jobs", {"job_ids": [UNKNOWN], "statuses": ["failed"]}, "statuses"),
    ("retry_jobs", {"queue": "bulk"}, "statuses"),
    ("retry_jobs", {"queue": "bulk", "statuses": ["active"]}, "statuses"),
    ("retry_jobs", {"queue": "bulk", "statuses": ["pending"]}, "statuses"),
    ("retry_jobs", {"queue": "", "statuses": ["failed"]}, "queue"),
    ("cancel_jobs", {"queue": "bulk", "statuses": ["failed"]}, "statuses"),
    ("cancel_jobs", {"queue": "bulk", "statuses": ["gone"]}, "statuses"),
    ("cancel_jobs", {"queue": "bulk", "statuses": "pending"}, "statuses"),
    ("cancel_jobs", {"job_ids": [UNKNOWN, 7]}, "job_ids"),
])
def test_bad_input_is_refused_before_anything_is_written(
    client: PortQueue, db: Db, schema: str, method: str, arguments: dict[str, Any],
    argument: str
) -> None:
    _jobs(client, db, schema)
    assert_refused_writing_nothing(
        db, schema, lambda: getattr(client, method)(**arguments), argument)


def test_cancel_jobs_stops_running_handlers_through_their_signal(
    pg_dsn: str, pq: PortQueue, db: Db, schema: str
) -> None:
    """End to end: a real worker's running handlers get the cancel NOTIFY (the
    poll is too slow to explain it) and their jobs end cancelled."""
    running = threading.Semaphore(0)
    with PortQueue(pg_dsn, schema=schema) as other_process:
        worker = SyncHarness(other_process)
        try:
            @other_process.handler("long", concurrency=2)
            def handler(job: Any) -> str:
                running.release()
                job.signal.wait(20)
                return "stopped"

            worker.start(poll_interval=5.0)
            ids = [str(pq.add_job(queue="long", data=n).job_id) for n in range(2)]
            for _ in ids:
                assert running.acquire(timeout=10), "the handlers did not start"
            counts = pq.cancel_jobs(queue="long", statuses=[JobStatus.ACTIVE])
            assert (counts, counts.signalled) == (2, 2)

            def ended() -> list[str]:
                rows = [finished_row(db, schema, job_id) for job_id in ids]
                return [row["status"] for row in rows if row is not None]

            assert wait_until(lambda: len(ended()) == 2 and ended(), timeout=3,
                              what="the signalled jobs to end") == ["cancelled", "cancelled"]
        finally:
            worker.close()
