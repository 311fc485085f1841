"""SPEC §3.2, managing: pause/resume, retry, cancel, remove jobs and schedules,
against real PostgreSQL.

States the API cannot reach without a worker (active, failed, completed) are
set with test-written SQL; outcomes are read back with SQL too."""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest
from psycopg import sql

from portqueue import (
    AddJobResult,
    CancelOutcome,
    CancelResult,
    DeduplicationReason,
    JobStatus,
    PauseMode,
    QueueInfo,
    QueuePausedError,
)
from tests.support.rows import (
    count_jobs,
    count_rows,
    db_now,
    finish,
    job_row,
    make_active,
    queue_row,
    update_job,
)

Db = psycopg.Connection[Any]
UNKNOWN_ID = "01900000-0000-7000-8000-000000000000"


# --- pause_queue / resume_queue ---


def test_pause_processing_still_accepts_adds(client: Any, db: Db, schema: str) -> None:
    info = client.pause_queue(queue="emails", mode=PauseMode.PROCESSING)
    assert isinstance(info, QueueInfo)
    assert info.queue == "emails" and info.paused is PauseMode.PROCESSING
    row = queue_row(db, schema, "emails")
    assert row is not None and row["paused"] == "processing" and row["paused_at"] is not None

    added = client.add_job(queue="emails", data={})
    (batched,) = client.add_jobs(queue="emails", jobs=[{"data": {}}])
    scheduled = client.add_job(queue="emails", data={}, schedule={"start_every_seconds": 60})
    assert added.status is JobStatus.PENDING and batched.job_id and scheduled.schedule_id
    assert count_jobs(db, schema) == 2
    assert count_rows(db, schema, "schedule") == 1
    assert client.get_queue_stats(queue="emails").paused is PauseMode.PROCESSING


def test_pause_mode_defaults_to_processing(client: Any, db: Db, schema: str) -> None:
    assert client.pause_queue(queue="emails").paused is PauseMode.PROCESSING
    assert queue_row(db, schema, "emails")["paused"] == "processing"  # type: ignore[index]


def test_pause_all_refuses_every_add_and_writes_nothing(
    client: Any, db: Db, schema: str
) -> None:
    client.add_job(queue="emails", data={"before": True})
    info = client.pause_queue(queue="emails", mode=PauseMode.ALL)
    assert info.paused is PauseMode.ALL

    with pytest.raises(QueuePausedError) as raised:
        client.add_job(queue="emails", data={})
    assert raised.value.queue == "emails"
    with pytest.raises(QueuePausedError):
        client.add_job(queue="emails", data={}, idempotency_key="k", singleton_key="s",
                       schedule={"start_after_seconds": 5})
    with pytest.raises(QueuePausedError):
        client.add_jobs(queue="emails", jobs=[{"data": 1}, {"data": 2}])
    with pytest.raises(QueuePausedError):
        client.add_job(queue="emails", data={}, schedule={"start_every_seconds": 60})
    with pytest.raises(QueuePausedError):
        client.add_job(queue="emails", data={}, schedule={"cron": "0 8 * * *"})
    assert count_jobs(db, schema) == 1
    assert count_rows(db, schema, "schedule") == 0

    # other queues are unaffected
    assert client.add_job(queue="other", data={}).job_id is not None

    stats = client.get_queue_stats(queue="emails")
    assert stats.paused is PauseMode.ALL
    queues = {q.queue: q for q in client.get_queues().items}
    assert queues["emails"].paused is PauseMode.ALL and queues["other"].paused is None

    resumed = client.resume_queue(queue="emails")
    assert resumed.paused is None and resumed.queue == "emails"
    row = queue_row(db, schema, "emails")
    assert row is not None and row["paused"] is None and row["paused_at"] is None
    assert client.add_job(queue="emails", data={}).status is JobStatus.PENDING
    assert len(client.add_jobs(queue="emails", jobs=[{"data": 1}, {"data": 2}])) == 2
    assert client.add_job(queue="emails", data={},
                          schedule={"start_every_seconds": 60}).schedule_id is not None
    assert count_jobs(db, schema) == 5
    assert client.get_queue_stats(queue="emails").paused is None


def test_pause_all_refuses_even_a_duplicate(client: Any, db: Db, schema: str) -> None:
    client.add_job(queue="emails", data={}, idempotency_key="k")
    client.pause_queue(queue="emails", mode=PauseMode.ALL)
    with pytest.raises(QueuePausedError):
        client.add_job(queue="emails", data={}, idempotency_key="k")
    assert count_jobs(db, schema) == 1


def test_pause_creates_the_queue_and_modes_switch(client: Any, db: Db, schema: str) -> None:
    assert queue_row(db, schema, "fresh") is None
    client.pause_queue(queue="fresh", mode=PauseMode.ALL)
    assert queue_row(db, schema, "fresh")["paused"] == "all"  # type: ignore[index]
    client.pause_queue(queue="fresh", mode=PauseMode.PROCESSING)
    assert queue_row(db, schema, "fresh")["paused"] == "processing"  # type: ignore[index]
    client.add_job(queue="fresh", data={})
    assert client.resume_queue(queue="fresh").paused is None
    assert client.resume_queue(queue="fresh").paused is None, "resume is idempotent"
    assert count_rows(db, schema, "queue") == 1


def test_resume_of_an_unknown_queue_creates_it_unpaused(client: Any, db: Db, schema: str) -> None:
    info = client.resume_queue(queue="never-seen")
    assert info.paused is None
    assert queue_row(db, schema, "never-seen") is not None


# --- retry_job ---


@pytest.mark.parametrize("status", ["failed", "cancelled", "completed", "expired"])
def test_retry_rearms_a_settled_job_in_place(
    client: Any, db: Db, schema: str, status: str
) -> None:
    added = client.add_job(queue="emails", data={"x": 1}, retry={"max_attempts": 3},
                           expire_in_seconds=300)
    errors = '[{"attempt": 1, "type": "E", "message": "boom"}]'
    update_job(db, schema, added.job_id,
               f"status = '{status}', finished_at = now(), started_at = now(), attempt = 2, "
               f"output = '{{\"r\": 1}}', progress = 0.5, errors = '{errors}', "
               "cancel_requested_at = now(), start_after = now() - interval '1 hour', "
               "lease_token = 7")
    before = db_now(db)
    result = client.retry_job(job_id=added.job_id)
    after = db_now(db)

    assert isinstance(result, AddJobResult)
    assert result.job_id == added.job_id and result.queue == "emails"
    assert result.status is JobStatus.PENDING
    assert result.deduplicated is False and result.deduplication_reason is None
    assert before <= result.start_after <= after
    row = job_row(db, schema, added.job_id)
    assert row["status"] == "pending" and row["attempt"] == 0
    assert row["finished_at"] is None and row["started_at"] is None
    assert row["output"] is None and row["progress"] is None
    assert row["cancel_requested_at"] is None
    assert row["lease_expires_at"] is None
    assert row["lease_token"] == 7, "fencing tokens only grow: a retry keeps the last one"
    assert row["errors"] == [{"attempt": 1, "type": "E", "message": "boom"}], "errors are kept"
    assert row["start_after"] == result.start_after
    assert (row["expire_at"] - row["start_after"]).total_seconds() == 300
    assert row["data"] == {"x": 1} and row["max_attempts"] == 3
    assert count_jobs(db, schema) == 1, "the same row, not a new job"


def test_retry_leaves_a_pending_job_as_it_is(client: Any, db: Db, schema: str) -> None:
    delayed = client.add_job(queue="emails", data={}, schedule={"start_after_seconds": 3600})
    update_job(db, schema, delayed.job_id, "attempt = 1, max_attempts = 3")
    before = job_row(db, schema, delayed.job_id)
    result = client.retry_job(job_id=delayed.job_id)
    assert result is not None and result.job_id == delayed.job_id
    assert result.status is JobStatus.PENDING and result.deduplicated is False
    assert result.start_after == delayed.start_after, "its delay is not dropped"
    assert job_row(db, schema, delayed.job_id) == before, "a pending job is not re-armed"


def test_retry_returns_none_for_unknown_and_active(client: Any, db: Db, schema: str) -> None:
    assert client.retry_job(job_id=UNKNOWN_ID) is None
    added = client.add_job(queue="emails", data={})
    make_active(db, schema, added.job_id)
    before = job_row(db, schema, added.job_id)
    assert client.retry_job(job_id=added.job_id) is None
    after = job_row(db, schema, added.job_id)
    assert after == before, "an active job is never touched"
    assert after["status"] == "active" and after["lease_token"] == 1


def test_retry_of_a_singleton_job_while_another_holds_the_key(
    client: Any, db: Db, schema: str
) -> None:
    old = client.add_job(queue="reindex", data={}, singleton_key="acme")
    finish(db, schema, old.job_id, "failed")
    holder = client.add_job(queue="reindex", data={}, singleton_key="acme")
    assert not holder.deduplicated

    result = client.retry_job(job_id=old.job_id)
    assert result is not None
    assert result.deduplicated is True
    assert result.deduplication_reason is DeduplicationReason.SINGLETON
    assert result.job_id == holder.job_id and result.status is JobStatus.PENDING
    assert job_row(db, schema, old.job_id)["status"] == "failed", "not re-armed"

    make_active(db, schema, holder.job_id)
    while_active = client.retry_job(job_id=old.job_id)
    assert while_active is not None and while_active.job_id == holder.job_id
    assert while_active.status is JobStatus.ACTIVE

    finish(db, schema, holder.job_id, "completed")
    rearmed = client.retry_job(job_id=old.job_id)
    assert rearmed is not None and rearmed.job_id == old.job_id and not rearmed.deduplicated
    assert job_row(db, schema, old.job_id)["status"] == "pending"


def test_retry_of_a_finished_singleton_job_with_a_free_key(
    client: Any, db: Db, schema: str
) -> None:
    job = client.add_job(queue="reindex", data={}, singleton_key="acme")
    finish(db, schema, job.job_id, "completed")
    result = client.retry_job(job_id=job.job_id)
    assert result is not None and result.job_id == job.job_id and not result.deduplicated
    # it now holds the key again
    again = client.add_job(queue="reindex", data={}, singleton_key="acme")
    assert again.deduplicated and again.job_id == job.job_id


# --- cancel_job ---


def test_cancel_pending_job(client: Any, db: Db, schema: str) -> None:
    added = client.add_job(queue="emails", data={})
    before = db_now(db)
    result = client.cancel_job(job_id=added.job_id)
    assert isinstance(result, CancelResult)
    assert result.job_id == added.job_id and result.outcome is CancelOutcome.CANCELLED
    row = job_row(db, schema, added.job_id)
    assert row["status"] == "cancelled"
    assert row["finished_at"] is not None and row["finished_at"] >= before


def test_cancel_delayed_job(client: Any, db: Db, schema: str) -> None:
    added = client.add_job(queue="emails", data={}, schedule={"start_after_seconds": 3600})
    assert client.cancel_job(job_id=added.job_id).outcome is CancelOutcome.CANCELLED
    row = job_row(db, schema, added.job_id)
    assert row["status"] == "cancelled" and row["finished_at"] is not None


@pytest.mark.parametrize("status", ["completed", "failed", "cancelled", "expired"])
def test_cancel_finished_job(client: Any, db: Db, schema: str, status: str) -> None:
    added = client.add_job(queue="emails", data={})
    finish(db, schema, added.job_id, status)
    before = job_row(db, schema, added.job_id)
    result = client.cancel_job(job_id=added.job_id)
    assert result.outcome is CancelOutcome.ALREADY_FINISHED
    assert job_row(db, schema, added.job_id) == before


def test_cancel_unknown_job(client: Any, db: Db, schema: str) -> None:
    result = client.cancel_job(job_id=UNKNOWN_ID)
    assert result.outcome is CancelOutcome.NOT_FOUND and result.job_id == UNKNOWN_ID


def wait_for_notification(
    listener: psycopg.Connection[Any], channel: str, deadline_seconds: float
) -> psycopg.Notify | None:
    deadline = time.monotonic() + deadline_seconds
    while (remaining := deadline - time.monotonic()) > 0:
        for notification in listener.notifies(timeout=remaining, stop_after=1):
            if notification.channel == channel:
                return notification
    return None


def test_cancel_active_job_signals_and_notifies(
    client: Any, pg_dsn: str, db: Db, schema: str
) -> None:
    added = client.add_job(queue="emails", data={})
    other = client.add_job(queue="emails", data={})
    make_active(db, schema, added.job_id)
    make_active(db, schema, other.job_id)
    channel = f"{schema}.cancel"
    with psycopg.connect(pg_dsn, autocommit=True) as listener:
        listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        before = db_now(db)
        result = client.cancel_job(job_id=added.job_id)
        assert result.outcome is CancelOutcome.SIGNALLED and result.job_id == added.job_id
        notification = wait_for_notification(listener, channel, 10)
        assert notification is not None, f"no NOTIFY on {channel!r}"
        assert notification.payload == added.job_id

        row = job_row(db, schema, added.job_id)
        assert row["status"] == "active", "the worker ends it, not cancel_job"
        assert row["finished_at"] is None
        assert row["cancel_requested_at"] is not None and row["cancel_requested_at"] >= before
        assert client.get_job(job_id=added.job_id).cancel_requested is True
        assert client.get_job(job_id=other.job_id).cancel_requested is False
        assert job_row(db, schema, other.job_id)["cancel_requested_at"] is None

        # asking again signals again but keeps the first request's time
        first_request = row["cancel_requested_at"]
        assert client.cancel_job(job_id=added.job_id).outcome is CancelOutcome.SIGNALLED
        again = wait_for_notification(listener, channel, 10)
        assert again is not None and again.payload == added.job_id
        assert job_row(db, schema, added.job_id)["cancel_requested_at"] == first_request


def test_cancel_of_a_pending_job_does_not_notify(
    client: Any, pg_dsn: str, db: Db, schema: str
) -> None:
    added = client.add_job(queue="emails", data={})
    active = client.add_job(queue="emails", data={})
    make_active(db, schema, active.job_id)
    channel = f"{schema}.cancel"
    with psycopg.connect(pg_dsn, autocommit=True) as listener:
        listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        assert client.cancel_job(job_id=added.job_id).outcome is CancelOutcome.CANCELLED
        # a later, signalled cancel is the first notification that arrives
        assert client.cancel_job(job_id=active.job_id).outcome is CancelOutcome.SIGNALLED
        notification = wait_for_notification(listener, channel, 10)
        assert notification is not None and notification.payload == active.job_id


# --- remove_job / remove_jobs ---


def test_remove_job(client: Any, db: Db, schema: str) -> None:
    pending = client.add_job(queue="emails", data={})
    done = client.add_job(queue="emails", data={})
    finish(db, schema, done.job_id, "completed")
    active = client.add_job(queue="emails", data={})
    make_active(db, schema, active.job_id)

    assert client.remove_job(job_id=pending.job_id) is True
    assert client.remove_job(job_id=pending.job_id) is False, "already gone"
    assert client.remove_job(job_id=done.job_id) is True
    assert client.remove_job(job_id=active.job_id) is False
    assert client.remove_job(job_id=UNKNOWN_ID) is False
    assert count_jobs(db, schema) == 1
    assert job_row(db, schema, active.job_id)["status"] == "active"


def test_remove_jobs_by_ids_skips_active(client: Any, db: Db, schema: str) -> None:
    a = client.add_job(queue="emails", data={})
    b = client.add_job(queue="other-queue", data={})
    c = client.add_job(queue="emails", data={})
    finish(db, schema, c.job_id, "failed")
    active = client.add_job(queue="emails", data={})
    make_active(db, schema, active.job_id)
    keep = client.add_job(queue="emails", data={})

    removed = client.remove_jobs(job_ids=[a.job_id, b.job_id, c.job_id, active.job_id,
                                          UNKNOWN_ID])
    assert removed == 3
    assert count_jobs(db, schema) == 2
    assert job_row(db, schema, active.job_id)["status"] == "active"
    assert job_row(db, schema, keep.job_id)["status"] == "pending"
    assert client.remove_jobs(job_ids=[a.job_id]) == 0
    assert client.remove_jobs(job_ids=[]) == 0


def test_remove_jobs_by_queue_and_statuses(client: Any, db: Db, schema: str) -> None:
    jobs = {status: client.add_job(queue="emails", data={}).job_id
            for status in ("pending", "completed", "failed", "cancelled", "expired")}
    for status in ("completed", "failed", "cancelled", "expired"):
        finish(db, schema, jobs[status], status)
    active = client.add_job(queue="emails", data={})
    make_active(db, schema, active.job_id)
    elsewhere = client.add_job(queue="other", data={})
    finish(db, schema, elsewhere.job_id, "completed")

    assert client.remove_jobs(queue="emails", statuses=[JobStatus.COMPLETED]) == 1
    assert count_jobs(db, schema, "status = 'completed'") == 1, "the other queue's stays"
    assert client.remove_jobs(queue="emails",
                              statuses=[JobStatus.FAILED, JobStatus.EXPIRED]) == 2
    assert client.remove_jobs(queue="emails", statuses=[JobStatus.FAILED]) == 0
    assert client.remove_jobs(queue="emails", statuses=["cancelled", JobStatus.PENDING]) == 2
    assert count_jobs(db, schema, "queue = 'emails'") == 1
    assert job_row(db, schema, active.job_id)["status"] == "active"
    assert client.remove_jobs(queue="emails", statuses=[]) == 0


def test_remove_jobs_with_active_in_statuses_raises_and_removes_nothing(
    client: Any, db: Db, schema: str
) -> None:
    done = client.add_job(queue="emails", data={})
    finish(db, schema, done.job_id, "completed")
    client.add_job(queue="emails", data={})
    with pytest.raises(ValueError, match="statuses"):
        client.remove_jobs(queue="emails", statuses=[JobStatus.COMPLETED, JobStatus.ACTIVE])
    with pytest.raises(ValueError, match="statuses"):
        client.remove_jobs(queue="emails", statuses=["active"])
    assert count_jobs(db, schema) == 2


# --- remove_schedule ---


def test_remove_schedule_leaves_its_jobs(client: Any, db: Db, schema: str) -> None:
    scheduled = client.add_job(queue="emails", data={}, schedule={"start_every_seconds": 60})
    other = client.add_job(queue="emails", data={}, schedule={"cron": "0 8 * * *"})
    # A job the schedule spawned (the scheduler comes with a later issue).
    spawned = client.add_job(queue="emails", data={"tick": 1})
    update_job(db, schema, spawned.job_id,
               f"schedule_id = '{scheduled.schedule_id}', scheduled_for = now()")

    assert client.remove_schedule(schedule_id=scheduled.schedule_id) is True
    assert client.remove_schedule(schedule_id=scheduled.schedule_id) is False
    assert client.remove_schedule(schedule_id=UNKNOWN_ID) is False
    assert count_rows(db, schema, "schedule") == 1
    assert count_rows(db, schema, "schedule", "id = %s", [other.schedule_id]) == 1
    row = job_row(db, schema, spawned.job_id)
    assert row["status"] == "pending" and str(row["schedule_id"]) == scheduled.schedule_id
    assert client.get_job(job_id=spawned.job_id).schedule_id == scheduled.schedule_id
    assert count_jobs(db, schema) == 1


def test_remove_schedule_frees_its_idempotency_key(client: Any, db: Db, schema: str) -> None:
    first = client.add_job(queue="emails", data={}, idempotency_key="digest",
                           schedule={"start_every_seconds": 60})
    assert client.add_job(queue="emails", data={}, idempotency_key="digest",
                          schedule={"start_every_seconds": 60}).deduplicated
    assert client.remove_schedule(schedule_id=first.schedule_id) is True
    second = client.add_job(queue="emails", data={}, idempotency_key="digest",
                            schedule={"start_every_seconds": 60})
    assert not second.deduplicated and second.schedule_id != first.schedule_id
    assert count_rows(db, schema, "schedule") == 1
