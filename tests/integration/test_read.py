"""SPEC §3.3, reading: get_job, get_jobs, get_queue_stats, get_queues, get_schedules,
and hostile queue names stored byte-exact, against real PostgreSQL."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from portqueue import (
    AsyncPortQueue,
    BackoffStrategy,
    JobSnapshot,
    JobStatus,
    Page,
    PauseMode,
    PortQueue,
    QueueInfo,
    QueueStats,
    ScheduleInfo,
)
from tests.support.clients import BlockingAsyncClient
from tests.support.rows import (
    assert_utc,
    count_jobs,
    count_rows,
    db_now,
    finish,
    job_row,
    make_active,
    queue_row,
    schedule_row,
    update_job,
)

Db = psycopg.Connection[Any]
UNKNOWN_ID = "01900000-0000-7000-8000-000000000000"


def datetimes_of(snapshot: Any) -> dict[str, datetime]:
    return {f.name: getattr(snapshot, f.name) for f in dataclasses.fields(snapshot)
            if isinstance(getattr(snapshot, f.name), datetime)}


# --- get_job ---


def test_get_job_returns_every_column(client: Any, db: Db, schema: str) -> None:
    source = client.add_job(queue="emails", data={})
    schedule = client.add_job(queue="emails", data={}, schedule={"start_every_seconds": 60})
    added = client.add_job(
        queue="emails", data={"to": "a@b.com"}, priority=4,
        retry={"max_attempts": 3, "delay_seconds": 5,
               "backoff": {"strategy": "linear", "factor": 1.5, "max_delay_seconds": 60}},
        expire_in_seconds=900, retention={"ttl_seconds": 86_400}, timeout_seconds=30,
        preferred_instance_key_pattern="ram-8gb", idempotency_key="idem", singleton_key="single",
        group_id="group", schedule={"start_after_seconds": 10})
    update_job(db, schema, added.job_id,
               "status = 'completed', attempt = 2, started_at = now(), finished_at = now(), "
               "output = '{\"message_id\": \"m-1\"}', progress = 1, "
               "errors = '[{\"attempt\": 1, \"message\": \"first\"}, "
               "{\"attempt\": 2, \"message\": \"second\"}]', "
               "attrs = '{\"step\": \"render\"}', cancel_requested_at = now(), "
               f"source_job_id = '{source.job_id}', schedule_id = '{schedule.schedule_id}', "
               "scheduled_for = now()")
    row = job_row(db, schema, added.job_id)

    snapshot = client.get_job(job_id=added.job_id)
    assert isinstance(snapshot, JobSnapshot)
    assert snapshot.job_id == added.job_id and snapshot.queue == "emails"
    assert snapshot.status is JobStatus.COMPLETED
    assert snapshot.data == {"to": "a@b.com"}
    assert snapshot.priority == 4
    assert snapshot.attempt == 2 and snapshot.max_attempts == 3
    assert snapshot.retry.delay_seconds == 5
    assert snapshot.retry.backoff.strategy is BackoffStrategy.LINEAR
    assert snapshot.retry.backoff.factor == 1.5
    assert snapshot.retry.backoff.max_delay_seconds == 60
    assert snapshot.retry.backoff.jitter is False
    assert snapshot.group_id == "group"
    assert snapshot.idempotency_key == "idem" and snapshot.singleton_key == "single"
    assert snapshot.preferred_instance_key_pattern == "ram-8gb"
    assert snapshot.schedule_id == schedule.schedule_id
    assert snapshot.source_job_id == source.job_id
    assert snapshot.retention_ttl_seconds == 86_400 and snapshot.timeout_seconds == 30
    assert snapshot.output == {"message_id": "m-1"}
    assert snapshot.errors == [{"attempt": 1, "message": "first"},
                               {"attempt": 2, "message": "second"}]
    assert snapshot.progress == 1.0
    assert snapshot.attrs == {"step": "render"}
    assert snapshot.cancel_requested is True
    for column in ("created_at", "start_after", "started_at", "finished_at", "expire_at",
                   "scheduled_for"):
        assert getattr(snapshot, column) == row[column], column
    assert snapshot.start_after - snapshot.created_at == timedelta(seconds=10)
    assert snapshot.expire_at - snapshot.start_after == timedelta(seconds=900)
    stamps = datetimes_of(snapshot)
    assert set(stamps) == {"created_at", "start_after", "started_at", "finished_at",
                           "expire_at", "scheduled_for"}
    for value in stamps.values():
        assert_utc(value)


def test_get_job_of_a_fresh_job(client: Any, db: Db, schema: str) -> None:
    added = client.add_job(queue="emails", data=[1])
    snapshot = client.get_job(job_id=added.job_id)
    assert snapshot.status is JobStatus.PENDING and snapshot.attempt == 0
    assert snapshot.max_attempts == 1
    assert snapshot.started_at is None and snapshot.finished_at is None
    assert snapshot.expire_at is None and snapshot.output is None and snapshot.progress is None
    assert snapshot.errors == [] and snapshot.attrs == {}
    assert snapshot.cancel_requested is False
    assert snapshot.schedule_id is None and snapshot.source_job_id is None
    assert snapshot.start_after == added.start_after


def test_get_job_unknown_is_none(client: Any, schema: str) -> None:
    assert client.get_job(job_id=UNKNOWN_ID) is None


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_datetimes_are_utc_whatever_the_session_time_zone(
    pg_dsn: str, db: Db, schema: str, kind: str
) -> None:
    tokyo = make_conninfo(pg_dsn, options="-c TimeZone=Asia/Tokyo")
    client: Any
    if kind == "sync":
        client = PortQueue(tokyo, schema=schema)
    else:
        client = BlockingAsyncClient(lambda: AsyncPortQueue(tokyo, schema=schema))
    try:
        added = client.add_job(queue="emails", data={}, expire_in_seconds=5)
        assert_utc(added.start_after)
        snapshot = client.get_job(job_id=added.job_id)
        for value in datetimes_of(snapshot).values():
            assert_utc(value)
        assert snapshot.created_at == job_row(db, schema, added.job_id)["created_at"]
        scheduled = client.add_job(queue="emails", data={}, schedule={"cron": "0 8 * * *"})
        assert_utc(scheduled.next_run_at)
        assert scheduled.next_run_at.hour == 8, "the cron string is UTC, not the session zone"
        (info,) = client.get_schedules(queue="emails").items
        assert_utc(info.next_run_at)
        assert_utc(info.created_at)
        (queue,) = client.get_queues().items
        assert_utc(queue.created_at)
    finally:
        client.close()


# --- get_jobs ---


def test_get_jobs_pages_newest_first(client: Any, db: Db, schema: str) -> None:
    ids = [client.add_job(queue="emails", data={"i": i}).job_id for i in range(7)]
    client.add_job(queue="other", data={})
    newest_first = list(reversed(ids))

    page = client.get_jobs(queue="emails", limit=3)
    assert isinstance(page, Page)
    assert page.total == 7
    assert [job.job_id for job in page.items] == newest_first[:3]
    assert all(isinstance(job, JobSnapshot) and job.queue == "emails" for job in page.items)
    assert client.get_jobs(queue="emails", limit=3, offset=3).items[0].job_id == ids[3]
    last = client.get_jobs(queue="emails", limit=3, offset=6)
    assert [job.job_id for job in last.items] == [ids[0]] and last.total == 7
    beyond = client.get_jobs(queue="emails", limit=3, offset=50)
    assert beyond.items == [] and beyond.total == 7

    walked: list[str] = []
    offset = 0
    while True:
        page = client.get_jobs(queue="emails", limit=2, offset=offset)
        walked.extend(job.job_id for job in page.items)
        offset += 2
        if offset >= page.total:
            break
    assert walked == newest_first

    empty = client.get_jobs(queue="nothing-here")
    assert empty.items == [] and empty.total == 0


def test_get_jobs_filters(client: Any, db: Db, schema: str) -> None:
    failed_a = client.add_job(queue="emails", data={}, group_id="a").job_id
    failed_b = client.add_job(queue="emails", data={}, group_id="b").job_id
    done_a = client.add_job(queue="emails", data={}, group_id="a").job_id
    pending_a = client.add_job(queue="emails", data={}, group_id="a").job_id
    pending = client.add_job(queue="emails", data={}).job_id
    other_queue = client.add_job(queue="other", data={}, group_id="a").job_id
    for job_id in (failed_a, failed_b):
        finish(db, schema, job_id, "failed")
    finish(db, schema, done_a, "completed")
    finish(db, schema, other_queue, "failed")

    def ids(page: Page[JobSnapshot]) -> list[str]:
        assert page.total == len(page.items)
        return [job.job_id for job in page.items]

    assert ids(client.get_jobs(queue="emails", statuses=[JobStatus.FAILED])) == [failed_b,
                                                                                 failed_a]
    assert ids(client.get_jobs(queue="emails",
                               statuses=[JobStatus.FAILED, JobStatus.COMPLETED])) == [
        done_a, failed_b, failed_a]
    assert ids(client.get_jobs(queue="emails", group_id="a")) == [pending_a, done_a, failed_a]
    assert ids(client.get_jobs(queue="emails", group_id="a",
                               statuses=[JobStatus.PENDING])) == [pending_a]
    assert ids(client.get_jobs(queue="emails", statuses=[JobStatus.ACTIVE])) == []
    assert ids(client.get_jobs(queue="emails", statuses=[JobStatus.PENDING])) == [pending,
                                                                                  pending_a]
    assert ids(client.get_jobs(queue="emails", group_id="none")) == []
    assert len(ids(client.get_jobs(queue="emails"))) == 5
    assert client.get_jobs(queue="emails", statuses=[JobStatus.FAILED], limit=1).total == 2


def test_get_jobs_limit_defaults_to_50_and_is_at_most_500(
    client: Any, db: Db, schema: str
) -> None:
    client.add_jobs(queue="emails", jobs=[{"data": i} for i in range(501)])
    default = client.get_jobs(queue="emails")
    assert len(default.items) == 50 and default.total == 501
    assert [job.data for job in default.items] == list(range(500, 450, -1))
    biggest = client.get_jobs(queue="emails", limit=500)
    assert len(biggest.items) == 500 and biggest.items[-1].data == 1
    for bad in (501, 0, -1):
        with pytest.raises(ValueError, match="limit"):
            client.get_jobs(queue="emails", limit=bad)
    with pytest.raises(ValueError, match="offset"):
        client.get_jobs(queue="emails", offset=-1)
    with pytest.raises(ValueError, match="limit"):
        client.get_queues(limit=501)
    with pytest.raises(ValueError, match="limit"):
        client.get_schedules(limit=501)
    assert len(client.get_queues(limit=500).items) == 1
    assert len(client.get_schedules(limit=500).items) == 0


# --- get_queue_stats ---


def test_get_queue_stats_counts_every_status(client: Any, db: Db, schema: str) -> None:
    wanted = {"pending": 2, "active": 1, "completed": 3, "failed": 1, "cancelled": 2,
              "expired": 1, "waiting": 0}
    for status, n in wanted.items():
        for _ in range(n):
            job_id = client.add_job(queue="emails", data={}).job_id
            if status == "active":
                make_active(db, schema, job_id)
            elif status != "pending":
                finish(db, schema, job_id, status)
    client.add_job(queue="emails", data={}, schedule={"start_after_seconds": 3600})  # delayed
    client.add_job(queue="other", data={})

    stats = client.get_queue_stats(queue="emails")
    assert isinstance(stats, QueueStats)
    assert stats.queue == "emails" and stats.paused is None
    assert set(stats.counts) == set(JobStatus)
    assert stats.counts == {JobStatus(status): n + (status == "pending")
                            for status, n in wanted.items()}


def test_get_queue_stats_zeros(client: Any, db: Db, schema: str) -> None:
    client.add_job(queue="emails", data={})
    for queue in ("never-seen", "other"):
        stats = client.get_queue_stats(queue=queue)
        assert stats.counts == dict.fromkeys(JobStatus, 0)
        assert all(type(n) is int for n in stats.counts.values())
        assert stats.oldest_pending_seconds is None and stats.paused is None
    client.pause_queue(queue="other", mode=PauseMode.PROCESSING)
    assert client.get_queue_stats(queue="other").paused is PauseMode.PROCESSING


def test_oldest_pending_seconds(client: Any, db: Db, schema: str) -> None:
    assert client.get_queue_stats(queue="emails").oldest_pending_seconds is None
    client.add_job(queue="emails", data={}, schedule={"start_after_seconds": 3600})
    assert client.get_queue_stats(queue="emails").oldest_pending_seconds is None, (
        "a delayed job is not waiting yet")
    old = client.add_job(queue="emails", data={})
    update_job(db, schema, old.job_id, "start_after = now() - interval '100 seconds'")
    older_but_failed = client.add_job(queue="emails", data={})
    update_job(db, schema, older_but_failed.job_id,
               "start_after = now() - interval '1 day', status = 'failed', finished_at = now()")
    client.add_job(queue="emails", data={})
    start_after = job_row(db, schema, old.job_id)["start_after"]

    before = db_now(db)
    stats = client.get_queue_stats(queue="emails")
    after = db_now(db)
    assert stats.oldest_pending_seconds is not None
    assert isinstance(stats.oldest_pending_seconds, float)
    assert (before - start_after).total_seconds() <= stats.oldest_pending_seconds
    assert stats.oldest_pending_seconds <= (after - start_after).total_seconds()
    assert stats.counts[JobStatus.PENDING] == 3


# --- get_queues ---


def test_get_queues_pages_with_defaults(client: Any, db: Db, schema: str) -> None:
    names = [f"queue-{i}" for i in range(5)]
    for name in names:
        client.add_job(queue=name, data={})
    # distinct, known creation times (newest first is by created_at)
    for i, name in enumerate(names):
        db.execute(sql.SQL("UPDATE {} SET created_at = now() - make_interval(hours => %s) "
                           "WHERE name = %s").format(sql.Identifier(schema, "queue")),
                   [10 - i, name])
    db.execute(sql.SQL(
        "UPDATE {} SET concurrency = 3, max_attempts = 4, retry_delay_seconds = 2, "
        "backoff_strategy = 'exponential', backoff_factor = 3, backoff_max_delay_seconds = 50, "
        "backoff_jitter = true, expire_in_seconds = 70, retention_ttl_seconds = 80, "
        "retention_keep_completed = 90, retention_keep_failed = 100, timeout_seconds = 11, "
        "lease_seconds = 12, dead_letter_queue = 'dead' WHERE name = 'queue-2'").format(
            sql.Identifier(schema, "queue")))
    client.pause_queue(queue="queue-1", mode=PauseMode.ALL)

    page = client.get_queues(limit=2)
    assert isinstance(page, Page) and page.total == 5
    assert [q.queue for q in page.items] == ["queue-4", "queue-3"]
    assert [q.queue for q in client.get_queues(limit=2, offset=2).items] == ["queue-2", "queue-1"]
    assert [q.queue for q in client.get_queues(limit=2, offset=4).items] == ["queue-0"]
    assert client.get_queues(offset=5).items == [] and client.get_queues(offset=5).total == 5
    everything = {q.queue: q for q in client.get_queues().items}
    assert set(everything) == set(names)

    configured = everything["queue-2"]
    assert isinstance(configured, QueueInfo)
    assert configured.paused is None
    assert configured.concurrency == 3
    assert configured.retry is not None
    assert configured.retry.max_attempts == 4 and configured.retry.delay_seconds == 2
    assert configured.retry.backoff.strategy is BackoffStrategy.EXPONENTIAL
    assert configured.retry.backoff.factor == 3
    assert configured.retry.backoff.max_delay_seconds == 50
    assert configured.retry.backoff.jitter is True
    assert configured.expire_in_seconds == 70
    assert configured.retention.ttl_seconds == 80
    assert configured.retention.keep_completed == 90
    assert configured.retention.keep_failed == 100
    assert configured.timeout_seconds == 11 and configured.lease_seconds == 12
    assert configured.dead_letter_queue == "dead"
    assert configured.created_at == queue_row(db, schema, "queue-2")["created_at"]  # type: ignore[index]
    assert_utc(configured.created_at)

    plain = everything["queue-0"]
    assert plain.retry is None and plain.concurrency is None and plain.expire_in_seconds is None
    assert plain.retention.ttl_seconds is None and plain.dead_letter_queue is None
    assert everything["queue-1"].paused is PauseMode.ALL


def test_get_queues_empty(client: Any, schema: str) -> None:
    page = client.get_queues()
    assert page.items == [] and page.total == 0


# --- get_schedules ---


def test_get_schedules_pages_and_filters(client: Any, db: Db, schema: str) -> None:
    every = client.add_job(queue="emails", data={"kind": "every"}, idempotency_key="every",
                           schedule={"start_every_seconds": 30})
    cron = client.add_job(queue="emails", data={"kind": "cron"},
                          schedule={"cron": {"pattern": "0 8 * * 1-5",
                                             "tz": "America/New_York"}})
    disabled = client.add_job(queue="emails", data={}, schedule={"start_every_seconds": 60})
    elsewhere = client.add_job(queue="other", data={}, schedule={"start_every_seconds": 60})
    ordered = [every.schedule_id, cron.schedule_id, disabled.schedule_id, elsewhere.schedule_id]
    for i, schedule_id in enumerate(ordered):
        db.execute(sql.SQL("UPDATE {} SET created_at = now() - make_interval(hours => %s) "
                           "WHERE id = %s").format(sql.Identifier(schema, "schedule")),
                   [10 - i, schedule_id])
    db.execute(sql.SQL("UPDATE {} SET enabled = false WHERE id = %s").format(
        sql.Identifier(schema, "schedule")), [disabled.schedule_id])

    def ids(page: Page[ScheduleInfo]) -> list[str]:
        return [s.schedule_id for s in page.items]

    emails = client.get_schedules(queue="emails")
    assert emails.total == 3
    assert ids(emails) == [disabled.schedule_id, cron.schedule_id, every.schedule_id]
    enabled = client.get_schedules(queue="emails", enabled=True)
    assert ids(enabled) == [cron.schedule_id, every.schedule_id] and enabled.total == 2
    assert ids(client.get_schedules(queue="emails", enabled=False)) == [disabled.schedule_id]
    everywhere = client.get_schedules()
    assert everywhere.total == 4 and ids(everywhere) == list(reversed(ordered))
    paged = client.get_schedules(limit=1, offset=1, enabled=True)
    assert ids(paged) == [cron.schedule_id] and paged.total == 3
    assert client.get_schedules(queue="nothing").total == 0

    infos = {s.schedule_id: s for s in everywhere.items}
    info = infos[every.schedule_id]
    assert isinstance(info, ScheduleInfo)
    assert info.queue == "emails" and info.every_seconds == 30 and info.cron is None
    assert info.tz == "UTC" and info.enabled is True
    assert info.next_run_at == every.next_run_at and info.last_run_at is None
    assert info.data == {"kind": "every"} and info.idempotency_key == "every"
    cron_info = infos[cron.schedule_id]
    assert cron_info.cron == "0 8 * * 1-5" and cron_info.tz == "America/New_York"
    assert cron_info.every_seconds is None and cron_info.idempotency_key is None
    assert cron_info.next_run_at == cron.next_run_at
    assert infos[disabled.schedule_id].enabled is False
    assert infos[elsewhere.schedule_id].queue == "other"
    assert cron_info.created_at == schedule_row(db, schema, cron.schedule_id)["created_at"]
    assert_utc(cron_info.created_at)


# --- hostile queue names ---

HOSTILE_NAMES = [
    "it's", 'say "hi"', "'; DROP TABLE job; --", "%s", "%(x)s", "%%", "$$", "$tag$ x $tag$",
    "{schema}", "{}", "{0}", "back\\slash\\", "\\x00\\n", "tab\tnew\nline", " spaced ",
    "emoji 🎉👩‍👩‍👧", "日本語のキュー", "\u200bzero-width", "-- comment", "/* c */",
    "a" * 128, "é" * 128, "🎉" * 128,
]


@pytest.mark.parametrize("name", HOSTILE_NAMES, ids=range(len(HOSTILE_NAMES)))
def test_hostile_queue_names_are_stored_byte_exact(
    client: Any, db: Db, schema: str, name: str
) -> None:
    added = client.add_job(queue=name, data={"q": name}, group_id=name, idempotency_key=name,
                           singleton_key=name)
    assert added.queue == name
    (batched,) = client.add_jobs(queue=name, jobs=[{"data": 2}])
    scheduled = client.add_job(queue=name, data={}, schedule={"start_every_seconds": 60})

    encoded = name.encode("utf-8")
    found = db.execute(sql.SQL("SELECT convert_to(name, 'UTF8'), char_length(name) FROM {}")
                       .format(sql.Identifier(schema, "queue"))).fetchall()
    assert found == [(encoded, len(name))]
    assert count_jobs(db, schema) == 2
    assert count_rows(db, schema, "job", "convert_to(queue, 'UTF8') = %s "
                      "AND convert_to(group_id, 'UTF8') = %s", [encoded, encoded]) == 1
    assert count_rows(db, schema, "job", "queue = %s", [name]) == 2
    assert count_rows(db, schema, "schedule", "convert_to(queue, 'UTF8') = %s", [encoded]) == 1

    snapshot = client.get_job(job_id=added.job_id)
    assert snapshot.queue == name and snapshot.data == {"q": name}
    assert snapshot.group_id == name and snapshot.idempotency_key == name
    page = client.get_jobs(queue=name, group_id=name)
    assert [job.job_id for job in page.items] == [added.job_id]
    assert client.get_jobs(queue=name).total == 2
    assert client.get_queue_stats(queue=name).counts[JobStatus.PENDING] == 2
    assert [q.queue for q in client.get_queues().items] == [name]
    (schedule_info,) = client.get_schedules(queue=name).items
    assert schedule_info.schedule_id == scheduled.schedule_id and schedule_info.queue == name

    again = client.add_job(queue=name, data={}, idempotency_key=name)
    assert again.deduplicated and again.job_id == added.job_id
    assert client.pause_queue(queue=name, mode=PauseMode.ALL).queue == name
    assert client.get_queue_stats(queue=name).paused is PauseMode.ALL
    assert client.resume_queue(queue=name).paused is None
    assert client.remove_jobs(queue=name, statuses=[JobStatus.PENDING]) == 2
    assert batched.queue == name
    assert count_jobs(db, schema) == 0


def test_queue_name_length_limit_counts_characters(client: Any, db: Db, schema: str) -> None:
    client.add_job(queue="🎉" * 128, data={})
    with pytest.raises(ValueError, match="queue"):
        client.add_job(queue="🎉" * 129, data={})
    assert count_jobs(db, schema) == 1
    assert queue_row(db, schema, "🎉" * 128) is not None


def test_datetimes_from_add_are_aware(client: Any, schema: str) -> None:
    added = client.add_job(queue="emails", data={})
    assert added.start_after is not None
    assert added.start_after.tzinfo is not None
    assert added.start_after.astimezone(timezone.utc) == added.start_after
