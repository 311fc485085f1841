"""SPEC §3.1, producing: add_job with every option, recurring adds, idempotency and
singleton keys, queue defaults, and add_jobs, against real PostgreSQL.

What portqueue wrote is read back with plain SQL; time is checked against the
database clock (``SELECT now()``), never the test's."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
import pytest
from croniter import croniter
from psycopg import sql

from portqueue import (
    AddJobResult,
    Backoff,
    BackoffStrategy,
    CronSpec,
    DeduplicationReason,
    JobStatus,
    PauseMode,
    PortQueue,
    PortQueueError,
    QueuePausedError,
    Retention,
    RetryPolicy,
    Schedule,
)
from portqueue.operations import STREAM_CHUNK
from tests.support.rows import (
    CallerTx,
    assert_utc,
    count_jobs,
    count_rows,
    db_now,
    finish,
    is_async,
    job_row,
    make_active,
    queue_row,
    schedule_row,
    set_queue,
)

Db = psycopg.Connection[Any]


# --- add_job: result and defaults ---


def test_add_job_result_and_default_row(client: Any, db: Db, schema: str) -> None:
    before = db_now(db)
    added = client.add_job(queue="emails", data={"to": "a@b.com", "n": [1, 2.5, None]})
    after = db_now(db)

    assert isinstance(added, AddJobResult)
    assert added.queue == "emails"
    assert added.status is JobStatus.PENDING
    assert added.deduplicated is False and added.deduplication_reason is None
    assert added.schedule_id is None and added.next_run_at is None
    assert_utc(added.start_after)
    assert before <= added.start_after <= after

    row = job_row(db, schema, added.job_id)
    assert str(row["id"]) == added.job_id
    assert row["queue"] == "emails"
    assert row["status"] == "pending"
    assert row["data"] == {"to": "a@b.com", "n": [1, 2.5, None]}
    assert row["start_after"] == added.start_after == row["created_at"]
    # built-in defaults when neither the job nor its queue says
    assert row["priority"] == 0
    assert row["attempt"] == 0 and row["max_attempts"] == 1
    assert row["retry_delay_seconds"] == 0
    assert row["backoff_strategy"] == "fixed" and row["backoff_factor"] == 2
    assert row["backoff_max_delay_seconds"] is None and row["backoff_jitter"] is False
    for column in ("expire_in_seconds", "expire_at", "retention_ttl_seconds", "timeout_seconds",
                   "preferred_instance_key_pattern", "group_id", "idempotency_key",
                   "singleton_key", "schedule_id", "started_at", "finished_at", "output",
                   "progress", "cancel_requested_at", "lease_token"):
        assert row[column] is None, column
    assert row["errors"] == [] and row["attrs"] == {}


@pytest.mark.parametrize("data", [None, 0, 1.5, True, "text", "[1, 2]", "null", "123", "",
                                  [1, "two"], {"nested": {"deep": [True]}}, {},
                                  "émoji 🎉 'quote' \"dq\" \\ back"])
def test_any_json_value_is_stored_as_given(client: Any, db: Db, schema: str, data: Any) -> None:
    # JSON null and strings that look like JSON are payloads like any other
    added = client.add_job(queue="emails", data=data)
    row = job_row(db, schema, added.job_id)
    assert row["data"] == data and type(row["data"]) is type(data)
    read = client.get_job(job_id=added.job_id).data
    assert read == data and type(read) is type(data)
    (listed,) = client.get_jobs(queue="emails").items
    assert listed.data == data and type(listed.data) is type(data)
    (batched,) = client.add_jobs(queue="batch", jobs=[{"data": data}])
    assert job_row(db, schema, batched.job_id)["data"] == data
    scheduled = client.add_job(queue="emails", data=data, schedule={"start_every_seconds": 5})
    assert schedule_row(db, schema, scheduled.schedule_id)["data"] == data
    (schedule_info,) = client.get_schedules(queue="emails").items
    assert schedule_info.data == data and type(schedule_info.data) is type(data)


def test_queue_row_is_created_on_first_use(client: Any, db: Db, schema: str) -> None:
    assert queue_row(db, schema, "first-use") is None
    client.add_job(queue="first-use", data={})
    row = queue_row(db, schema, "first-use")
    assert row is not None and row["paused"] is None
    client.add_job(queue="first-use", data={})
    assert count_rows(db, schema, "queue", "name = %s", ["first-use"]) == 1
    assert count_jobs(db, schema, "queue = 'first-use'") == 2


# --- add_job: every option lands in the row ---


def test_priority_is_stored(client: Any, db: Db, schema: str) -> None:
    for priority in (10, -5, 2**31 - 1):
        added = client.add_job(queue="emails", data={}, priority=priority)
        assert job_row(db, schema, added.job_id)["priority"] == priority


RETRY_DICT = {
    "max_attempts": 5,
    "delay_seconds": 2,
    "backoff": {"strategy": BackoffStrategy.EXPONENTIAL, "factor": 3,
                "max_delay_seconds": 300, "jitter": True},
}
RETRY_DATACLASS = RetryPolicy(
    max_attempts=5, delay_seconds=2,
    backoff=Backoff(strategy=BackoffStrategy.EXPONENTIAL, factor=3,
                    max_delay_seconds=300, jitter=True))


@pytest.mark.parametrize("retry", [RETRY_DICT, RETRY_DATACLASS,
                                   {**RETRY_DICT, "backoff": {**RETRY_DICT["backoff"],  # type: ignore[dict-item]
                                                              "strategy": "exponential"}}],
                         ids=["dict", "dataclass", "dict-with-string-strategy"])
def test_retry_policy_is_stored(client: Any, db: Db, schema: str, retry: Any) -> None:
    added = client.add_job(queue="emails", data={}, retry=retry)
    row = job_row(db, schema, added.job_id)
    assert row["max_attempts"] == 5
    assert row["retry_delay_seconds"] == 2
    assert row["backoff_strategy"] == "exponential"
    assert row["backoff_factor"] == 3
    assert row["backoff_max_delay_seconds"] == 300
    assert row["backoff_jitter"] is True
    assert client.get_job(job_id=added.job_id).retry == RETRY_DATACLASS


@pytest.mark.parametrize("strategy", list(BackoffStrategy))
def test_every_backoff_strategy_is_stored(
    client: Any, db: Db, schema: str, strategy: BackoffStrategy
) -> None:
    added = client.add_job(queue="emails", data={},
                           retry={"max_attempts": 3, "backoff": {"strategy": strategy}})
    row = job_row(db, schema, added.job_id)
    assert row["backoff_strategy"] == strategy.value
    assert row["max_attempts"] == 3 and row["retry_delay_seconds"] == 0
    assert row["backoff_jitter"] is False and row["backoff_max_delay_seconds"] is None


def test_expire_in_seconds_counts_from_start_after(client: Any, db: Db, schema: str) -> None:
    now_job = client.add_job(queue="emails", data={}, expire_in_seconds=3600)
    row = job_row(db, schema, now_job.job_id)
    assert row["expire_in_seconds"] == 3600
    assert row["expire_at"] - row["start_after"] == timedelta(seconds=3600)
    assert row["start_after"] == row["created_at"]
    # a delayed job cannot expire before it could ever start
    delayed = client.add_job(queue="emails", data={}, expire_in_seconds=60,
                             schedule={"start_after_seconds": 600})
    row = job_row(db, schema, delayed.job_id)
    assert row["start_after"] - row["created_at"] == timedelta(seconds=600)
    assert row["expire_at"] - row["start_after"] == timedelta(seconds=60)
    assert client.get_job(job_id=delayed.job_id).expire_at == row["expire_at"]


def test_largest_delay_and_expiry_do_not_overflow(client: Any, db: Db, schema: str) -> None:
    # Both are validated up to 2**31 - 1; their sum must not overflow an integer
    # in SQL (an error there would abort a caller's transaction).
    big = 2**31 - 1
    added = client.add_job(queue="emails", data={}, expire_in_seconds=big,
                           schedule={"start_after_seconds": big})
    row = job_row(db, schema, added.job_id)
    assert row["start_after"] - row["created_at"] == timedelta(seconds=big)
    assert row["expire_at"] - row["start_after"] == timedelta(seconds=big)


@pytest.mark.parametrize("retention", [{"ttl_seconds": 604_800}, Retention(ttl_seconds=604_800)],
                         ids=["dict", "dataclass"])
def test_retention_ttl_is_stored(client: Any, db: Db, schema: str, retention: Any) -> None:
    added = client.add_job(queue="emails", data={}, retention=retention)
    assert job_row(db, schema, added.job_id)["retention_ttl_seconds"] == 604_800
    zero = client.add_job(queue="emails", data={}, retention={"ttl_seconds": 0})
    assert job_row(db, schema, zero.job_id)["retention_ttl_seconds"] == 0


def test_timeout_seconds_is_stored(client: Any, db: Db, schema: str) -> None:
    added = client.add_job(queue="emails", data={}, timeout_seconds=45)
    assert job_row(db, schema, added.job_id)["timeout_seconds"] == 45
    assert client.get_job(job_id=added.job_id).timeout_seconds == 45


def test_preferred_instance_key_pattern_is_stored(client: Any, db: Db, schema: str) -> None:
    pattern = r"ram-8gb.*cpu-4cor|^test-host-\d+$"
    added = client.add_job(queue="emails", data={}, preferred_instance_key_pattern=pattern)
    assert job_row(db, schema, added.job_id)["preferred_instance_key_pattern"] == pattern
    # stored as written, and usable as a Postgres regex against an instance key (~)
    matched = db.execute("SELECT %s ~ %s, %s ~ %s",
                         ["x-ram-8gb-cpu-4core", pattern, "RAM-8GB-CPU-4CORE", pattern]).fetchone()
    assert matched == (True, False)


def test_preferred_instance_key_pattern_needs_an_instance_key(
    pg_dsn: str, db: Db, schema: str
) -> None:
    with PortQueue(pg_dsn, schema=schema) as keyless, pytest.raises(
        ValueError, match="preferred_instance_key_pattern"
    ):
        keyless.add_job(queue="emails", data={}, preferred_instance_key_pattern="ram-8gb")
    assert count_jobs(db, schema) == 0


def test_group_id_idempotency_and_singleton_keys_are_stored(
    client: Any, db: Db, schema: str
) -> None:
    added = client.add_job(queue="emails", data={}, group_id="newsletter-2026-11",
                           idempotency_key="charge:1", singleton_key="reindex:acme")
    row = job_row(db, schema, added.job_id)
    assert row["group_id"] == "newsletter-2026-11"
    assert row["idempotency_key"] == "charge:1"
    assert row["singleton_key"] == "reindex:acme"


@pytest.mark.parametrize("schedule", [{"start_after_seconds": 86_400},
                                      Schedule(start_after_seconds=86_400)],
                         ids=["dict", "dataclass"])
def test_start_after_seconds_delays_by_the_db_clock(
    client: Any, db: Db, schema: str, schedule: Any
) -> None:
    before = db_now(db)
    added = client.add_job(queue="emails", data={}, schedule=schedule)
    after = db_now(db)
    assert added.status is JobStatus.PENDING and added.job_id is not None
    assert added.schedule_id is None and added.next_run_at is None
    assert_utc(added.start_after)
    delay = timedelta(seconds=86_400)
    assert before + delay <= added.start_after <= after + delay
    row = job_row(db, schema, added.job_id)
    # now() is the transaction's clock: the delay is exact against created_at
    assert row["start_after"] - row["created_at"] == delay
    assert row["start_after"] == added.start_after


def test_start_after_zero_is_immediate(client: Any, db: Db, schema: str) -> None:
    added = client.add_job(queue="emails", data={}, schedule={"start_after_seconds": 0})
    row = job_row(db, schema, added.job_id)
    assert row["start_after"] == row["created_at"]


# --- queue defaults ---


# A job setting nothing but data leaves every option to the queue's defaults;
# one with a delay sets one of its own and takes the others from the queue.
@pytest.mark.parametrize("options", [{}, {"schedule": {"start_after_seconds": 10}}],
                         ids=["data only", "with a delay"])
def test_queue_defaults_apply_when_the_job_does_not_set_them(
    client: Any, db: Db, schema: str, options: dict[str, Any]
) -> None:
    client.add_job(queue="defaults", data={})  # creates the queue row
    set_queue(db, schema, "defaults",
                       "max_attempts = 4, retry_delay_seconds = 7, backoff_strategy = 'linear', "
                       "backoff_factor = 5, backoff_max_delay_seconds = 99, backoff_jitter = true, "
                       "expire_in_seconds = 120, timeout_seconds = 30, "
                       "retention_ttl_seconds = 3600")
    added = client.add_job(queue="defaults", data={}, **options)
    row = job_row(db, schema, added.job_id)
    assert row["start_after"] == added.start_after
    assert row["retention_ttl_seconds"] is None, "resolved when pruning, not stored"
    assert row["max_attempts"] == 4
    assert row["retry_delay_seconds"] == 7
    assert row["backoff_strategy"] == "linear"
    assert row["backoff_factor"] == 5
    assert row["backoff_max_delay_seconds"] == 99
    assert row["backoff_jitter"] is True
    assert row["expire_in_seconds"] == 120
    assert row["expire_at"] - row["start_after"] == timedelta(seconds=120)
    assert row["timeout_seconds"] == 30
    snapshot = client.get_job(job_id=added.job_id)
    assert snapshot.max_attempts == 4 and snapshot.timeout_seconds == 30


def test_job_options_override_queue_defaults(client: Any, db: Db, schema: str) -> None:
    client.add_job(queue="defaults", data={})
    set_queue(db, schema, "defaults",
                       "max_attempts = 4, retry_delay_seconds = 7, backoff_strategy = 'linear', "
                       "backoff_max_delay_seconds = 99, expire_in_seconds = 120, "
                       "timeout_seconds = 30")
    added = client.add_job(queue="defaults", data={}, retry={"max_attempts": 2},
                           expire_in_seconds=5, timeout_seconds=9,
                           retention={"ttl_seconds": 1})
    row = job_row(db, schema, added.job_id)
    # a job's retry policy is taken whole: nothing of the queue's leaks into it
    assert row["max_attempts"] == 2
    assert row["retry_delay_seconds"] == 0
    assert row["backoff_strategy"] == "fixed"
    assert row["backoff_max_delay_seconds"] is None
    assert row["expire_in_seconds"] == 5 and row["timeout_seconds"] == 9
    assert row["retention_ttl_seconds"] == 1


def test_queue_defaults_are_resolved_at_insert(client: Any, db: Db, schema: str) -> None:
    client.add_job(queue="defaults", data={})
    set_queue(db, schema, "defaults", "max_attempts = 4")
    first = client.add_job(queue="defaults", data={})
    set_queue(db, schema, "defaults", "max_attempts = 9")
    second = client.add_job(queue="defaults", data={})
    assert job_row(db, schema, first.job_id)["max_attempts"] == 4
    assert job_row(db, schema, second.job_id)["max_attempts"] == 9


# --- recurring adds ---


def test_start_every_seconds_stores_a_schedule(client: Any, db: Db, schema: str) -> None:
    before = db_now(db)
    added = client.add_job(queue="emails", data={"digest": True},
                           schedule={"start_every_seconds": 30})
    after = db_now(db)
    assert added.job_id is None and added.status is None and added.start_after is None
    assert added.deduplicated is False and added.queue == "emails"
    assert added.schedule_id is not None
    assert_utc(added.next_run_at)
    period = timedelta(seconds=30)
    assert before + period <= added.next_run_at <= after + period

    row = schedule_row(db, schema, added.schedule_id)
    assert row["queue"] == "emails"
    assert row["every_seconds"] == 30 and row["cron"] is None
    assert row["next_run_at"] == added.next_run_at
    assert row["data"] == {"digest": True}
    assert row["enabled"] is True
    assert row["next_run_at"] - row["created_at"] == period
    assert count_jobs(db, schema) == 0, "a recurring add spawns nothing itself"
    assert queue_row(db, schema, "emails") is not None


def cron_ticks(pattern: str, tz: str, *instants: datetime) -> set[datetime]:
    """croniter's next tick in ``tz`` after each of ``instants``, in UTC."""
    zone = ZoneInfo(tz)
    return {croniter(pattern, at.astimezone(zone)).get_next(datetime).astimezone(timezone.utc)
            for at in instants}


@pytest.mark.parametrize("schedule", [{"cron": "0 8 * * 1-5"}, Schedule(cron="0 8 * * 1-5")],
                         ids=["dict", "dataclass"])
def test_cron_string_is_utc(client: Any, db: Db, schema: str, schedule: Any) -> None:
    before = db_now(db)
    added = client.add_job(queue="emails", data={}, schedule=schedule)
    after = db_now(db)
    assert added.job_id is None and added.schedule_id is not None
    assert added.next_run_at in cron_ticks("0 8 * * 1-5", "UTC", before, after)
    assert_utc(added.next_run_at)
    assert (added.next_run_at.hour, added.next_run_at.minute) == (8, 0)
    assert added.next_run_at.weekday() < 5
    assert before < added.next_run_at <= after + timedelta(days=3, minutes=1)
    row = schedule_row(db, schema, added.schedule_id)
    assert row["cron"] == "0 8 * * 1-5" and row["tz"] == "UTC" and row["every_seconds"] is None
    assert row["next_run_at"] == added.next_run_at


@pytest.mark.parametrize(
    "cron", [{"pattern": "0 8 * * 1-5", "tz": "America/New_York"},
             CronSpec(pattern="0 8 * * 1-5", tz="America/New_York")],
    ids=["dict", "dataclass"])
def test_cron_with_a_time_zone(client: Any, db: Db, schema: str, cron: Any) -> None:
    before = db_now(db)
    added = client.add_job(queue="emails", data={}, schedule={"cron": cron})
    after = db_now(db)
    assert added.next_run_at in cron_ticks("0 8 * * 1-5", "America/New_York", before, after)
    local = added.next_run_at.astimezone(ZoneInfo("America/New_York"))
    assert (local.hour, local.minute, local.second) == (8, 0, 0)
    assert local.weekday() < 5
    assert added.next_run_at.hour in (12, 13), "8:00 in New York is 12:00 or 13:00 UTC"
    row = schedule_row(db, schema, added.schedule_id)
    assert row["cron"] == "0 8 * * 1-5" and row["tz"] == "America/New_York"
    assert row["next_run_at"] == added.next_run_at


@pytest.mark.parametrize(("pattern", "tz"), [("*/7 * * * *", "Asia/Kathmandu"),
                                             ("30 2 * * *", "Europe/Berlin"),
                                             ("0 0 1 * *", "Australia/Lord_Howe")])
def test_cron_next_run_is_croniter_from_the_db_clock_exactly(
    client: Any, pg_dsn: str, db: Db, schema: str, pattern: str, tz: str
) -> None:
    # Inside one transaction now() is fixed, so the clock portqueue read is
    # exactly the one this test reads.
    with CallerTx(client, pg_dsn) as caller:
        ((clock,),) = caller.execute("SELECT now()")
        added = client.add_job(queue="emails", data={}, schedule={"cron": {"pattern": pattern,
                                                                             "tz": tz}},
                               tx=caller.tx)
        caller.commit()
    assert {added.next_run_at} == cron_ticks(pattern, tz, clock)
    assert added.next_run_at > clock
    assert schedule_row(db, schema, added.schedule_id)["next_run_at"] == added.next_run_at


def test_recurring_options_become_the_job_template(client: Any, db: Db, schema: str) -> None:
    added = client.add_job(
        queue="emails", data={"report": "daily"}, schedule={"start_every_seconds": 3600},
        priority=7, retry=RETRY_DICT, expire_in_seconds=600, retention={"ttl_seconds": 60},
        timeout_seconds=20, preferred_instance_key_pattern="ram-8gb", group_id="reports",
        singleton_key="daily-report", idempotency_key="daily-report-schedule")
    row = schedule_row(db, schema, added.schedule_id)
    assert row["data"] == {"report": "daily"}
    assert row["idempotency_key"] == "daily-report-schedule"
    template = row["job_options"]
    assert template["priority"] == 7
    assert template["max_attempts"] == 5 and template["retry_delay_seconds"] == 2
    assert template["backoff_strategy"] == "exponential" and template["backoff_factor"] == 3
    assert template["backoff_max_delay_seconds"] == 300 and template["backoff_jitter"] is True
    assert template["expire_in_seconds"] == 600
    assert template["retention_ttl_seconds"] == 60
    assert template["timeout_seconds"] == 20
    assert template["preferred_instance_key_pattern"] == "ram-8gb"
    assert template["group_id"] == "reports"
    assert template["singleton_key"] == "daily-report"
    # the schedule's own identity is not stamped onto every spawned job
    assert "idempotency_key" not in template and "id" not in template
    assert count_jobs(db, schema) == 0


# --- idempotency ---


def test_idempotency_first_writer_wins(client: Any, db: Db, schema: str) -> None:
    first = client.add_job(queue="payments", data={"order": 1, "try": 1},
                           idempotency_key="charge:1", priority=1)
    again = client.add_job(queue="payments", data={"order": 1, "try": 2},
                           idempotency_key="charge:1", priority=9)
    assert first.deduplicated is False and first.deduplication_reason is None
    assert again.deduplicated is True
    assert again.deduplication_reason is DeduplicationReason.IDEMPOTENCY
    assert again.job_id == first.job_id and again.queue == "payments"
    assert again.status is JobStatus.PENDING and again.start_after == first.start_after
    assert count_jobs(db, schema) == 1
    row = job_row(db, schema, first.job_id)
    assert row["data"] == {"order": 1, "try": 1} and row["priority"] == 1, "unchanged"


@pytest.mark.parametrize("status", ["completed", "failed", "cancelled", "expired", "active"])
def test_idempotency_holds_forever(client: Any, db: Db, schema: str, status: str) -> None:
    first = client.add_job(queue="payments", data={}, idempotency_key="charge:2")
    if status == "active":
        make_active(db, schema, first.job_id)
    else:
        finish(db, schema, first.job_id, status)
    again = client.add_job(queue="payments", data={}, idempotency_key="charge:2")
    assert again.deduplicated is True
    assert again.deduplication_reason is DeduplicationReason.IDEMPOTENCY
    assert again.job_id == first.job_id
    assert again.status is JobStatus(status)
    assert count_jobs(db, schema) == 1


def test_idempotency_keys_are_queue_scoped(client: Any, db: Db, schema: str) -> None:
    a = client.add_job(queue="payments", data={}, idempotency_key="k")
    b = client.add_job(queue="refunds", data={}, idempotency_key="k")
    assert not b.deduplicated and b.job_id != a.job_id
    assert count_jobs(db, schema) == 2


def test_idempotency_wins_over_singleton(client: Any, db: Db, schema: str) -> None:
    first = client.add_job(queue="payments", data={}, idempotency_key="k", singleton_key="s")
    again = client.add_job(queue="payments", data={}, idempotency_key="k", singleton_key="s")
    assert again.deduplication_reason is DeduplicationReason.IDEMPOTENCY
    assert again.job_id == first.job_id


def test_recurring_idempotency_dedups_against_schedules_only(
    client: Any, db: Db, schema: str
) -> None:
    one_off = client.add_job(queue="emails", data={}, idempotency_key="digest")
    schedule = client.add_job(queue="emails", data={"v": 1}, idempotency_key="digest",
                              schedule={"start_every_seconds": 60})
    assert schedule.deduplicated is False and schedule.schedule_id is not None
    assert one_off.job_id is not None and not one_off.deduplicated

    again = client.add_job(queue="emails", data={"v": 2}, idempotency_key="digest",
                           schedule={"cron": "0 * * * *"})
    assert again.deduplicated is True
    assert again.deduplication_reason is DeduplicationReason.IDEMPOTENCY
    assert again.schedule_id == schedule.schedule_id
    assert again.next_run_at == schedule.next_run_at
    assert again.job_id is None
    assert count_rows(db, schema, "schedule") == 1
    row = schedule_row(db, schema, schedule.schedule_id)
    assert row["data"] == {"v": 1} and row["every_seconds"] == 60 and row["cron"] is None

    one_off_again = client.add_job(queue="emails", data={}, idempotency_key="digest")
    assert one_off_again.deduplicated and one_off_again.job_id == one_off.job_id
    assert count_jobs(db, schema) == 1

    other_queue = client.add_job(queue="other", data={}, idempotency_key="digest",
                                 schedule={"start_every_seconds": 60})
    assert not other_queue.deduplicated
    assert count_rows(db, schema, "schedule") == 2


def test_recurring_adds_without_a_key_are_all_stored(client: Any, db: Db, schema: str) -> None:
    a = client.add_job(queue="emails", data={}, schedule={"start_every_seconds": 60})
    b = client.add_job(queue="emails", data={}, schedule={"start_every_seconds": 60})
    assert a.schedule_id != b.schedule_id and not b.deduplicated
    assert count_rows(db, schema, "schedule") == 2


# --- singleton ---


def test_singleton_one_pending_or_active_at_a_time(client: Any, db: Db, schema: str) -> None:
    first = client.add_job(queue="reindex", data={"n": 1}, singleton_key="reindex:acme")
    again = client.add_job(queue="reindex", data={"n": 2}, singleton_key="reindex:acme")
    assert again.deduplicated is True
    assert again.deduplication_reason is DeduplicationReason.SINGLETON
    assert again.job_id == first.job_id and again.status is JobStatus.PENDING

    make_active(db, schema, first.job_id)
    while_active = client.add_job(queue="reindex", data={"n": 3}, singleton_key="reindex:acme")
    assert while_active.deduplicated and while_active.job_id == first.job_id
    assert while_active.status is JobStatus.ACTIVE
    assert count_jobs(db, schema) == 1

    other_key = client.add_job(queue="reindex", data={}, singleton_key="reindex:globex")
    other_queue = client.add_job(queue="reindex-2", data={}, singleton_key="reindex:acme")
    assert not other_key.deduplicated and not other_queue.deduplicated


@pytest.mark.parametrize("status", ["completed", "failed", "cancelled", "expired"])
def test_singleton_frees_when_the_holder_finishes(
    client: Any, db: Db, schema: str, status: str
) -> None:
    first = client.add_job(queue="reindex", data={}, singleton_key="reindex:acme")
    finish(db, schema, first.job_id, status)
    second = client.add_job(queue="reindex", data={}, singleton_key="reindex:acme")
    assert second.deduplicated is False and second.deduplication_reason is None
    assert second.job_id != first.job_id and second.status is JobStatus.PENDING
    third = client.add_job(queue="reindex", data={}, singleton_key="reindex:acme")
    assert third.deduplicated and third.job_id == second.job_id
    assert count_jobs(db, schema, "singleton_key = 'reindex:acme'") == 2


def test_delayed_job_holds_its_singleton_key(client: Any, db: Db, schema: str) -> None:
    delayed = client.add_job(queue="reindex", data={}, singleton_key="s",
                             schedule={"start_after_seconds": 3600})
    again = client.add_job(queue="reindex", data={}, singleton_key="s")
    assert again.deduplicated and again.job_id == delayed.job_id
    assert again.start_after == delayed.start_after


# --- add_jobs ---


def test_add_jobs_one_result_per_entry_in_order(client: Any, db: Db, schema: str) -> None:
    entries = [{"data": {"i": i}, "priority": p} for i, p in enumerate([0, 10, -3, 10, 5])]
    entries[2]["group_id"] = "batch"
    entries[4]["schedule"] = {"start_after_seconds": 60}
    results = client.add_jobs(queue="emails", jobs=entries)
    assert len(results) == 5
    assert len({r.job_id for r in results}) == 5
    for i, result in enumerate(results):
        assert isinstance(result, AddJobResult)
        assert result.queue == "emails" and result.status is JobStatus.PENDING
        assert not result.deduplicated
        row = job_row(db, schema, result.job_id)
        assert row["data"] == {"i": i}, "results are in entry order"
        assert row["priority"] == entries[i]["priority"]
        assert row["start_after"] == result.start_after
    assert job_row(db, schema, results[2].job_id)["group_id"] == "batch"
    delayed = job_row(db, schema, results[4].job_id)
    assert delayed["start_after"] - delayed["created_at"] == timedelta(seconds=60)
    assert count_jobs(db, schema) == 5


def test_add_jobs_entries_take_every_option(client: Any, db: Db, schema: str) -> None:
    (result,) = client.add_jobs(queue="emails", jobs=[{
        "data": {}, "priority": 3, "retry": RETRY_DATACLASS, "expire_in_seconds": 10,
        "retention": Retention(ttl_seconds=5), "timeout_seconds": 8,
        "preferred_instance_key_pattern": "ram", "idempotency_key": "i", "singleton_key": "s",
        "group_id": "g"}])
    row = job_row(db, schema, result.job_id)
    assert (row["priority"], row["max_attempts"], row["backoff_strategy"]) == (3, 5, "exponential")
    assert row["expire_at"] - row["start_after"] == timedelta(seconds=10)
    assert (row["retention_ttl_seconds"], row["timeout_seconds"]) == (5, 8)
    assert (row["preferred_instance_key_pattern"], row["idempotency_key"],
            row["singleton_key"], row["group_id"]) == ("ram", "i", "s", "g")


def test_add_jobs_nothing_is_shared_between_entries(client: Any, db: Db, schema: str) -> None:
    results = client.add_jobs(queue="emails", jobs=[
        {"data": 1, "priority": 10, "retry": {"max_attempts": 3}, "group_id": "g"},
        {"data": 2},
    ])
    row = job_row(db, schema, results[1].job_id)
    assert row["priority"] == 0 and row["max_attempts"] == 1 and row["group_id"] is None


def test_add_jobs_dedups_inside_one_batch(client: Any, db: Db, schema: str) -> None:
    results = client.add_jobs(queue="payments", jobs=[
        {"data": "a", "idempotency_key": "k1"},
        {"data": "b", "singleton_key": "s1"},
        {"data": "c", "idempotency_key": "k1"},
        {"data": "d", "singleton_key": "s1"},
        {"data": "e"},
    ])
    assert [r.deduplicated for r in results] == [False, False, True, True, False]
    assert results[2].job_id == results[0].job_id
    assert results[2].deduplication_reason is DeduplicationReason.IDEMPOTENCY
    assert results[3].job_id == results[1].job_id
    assert results[3].deduplication_reason is DeduplicationReason.SINGLETON
    assert count_jobs(db, schema) == 3
    assert job_row(db, schema, results[0].job_id)["data"] == "a", "first writer wins"


def test_add_jobs_dedups_against_existing_jobs(client: Any, db: Db, schema: str) -> None:
    existing = client.add_job(queue="payments", data="old", idempotency_key="k1")
    held = client.add_job(queue="payments", data="old", singleton_key="s1")
    results = client.add_jobs(queue="payments", jobs=[
        {"data": "x"}, {"data": "y", "idempotency_key": "k1"},
        {"data": "z", "singleton_key": "s1"}])
    assert not results[0].deduplicated
    assert results[1].deduplicated and results[1].job_id == existing.job_id
    assert results[2].deduplicated and results[2].job_id == held.job_id
    assert count_jobs(db, schema) == 3


# Awkward payloads for the batch's one JSON array and its per-column arrays:
# JSON null (not SQL NULL), the text "NULL" (an unquoted NULL in an array
# literal), quotes, backslashes, braces and commas (array-literal syntax).
AWKWARD_DATA = [None, "NULL", "null", 'a"b\\c', "{x,y}", [None, "", {}], 0, -1.5, "ü✓", {}]


def test_add_jobs_each_entry_keeps_its_own_options_and_data(
    client: Any, db: Db, schema: str
) -> None:
    # Only some entries set each option: the others must take the defaults,
    # not a neighbour's value, and each row its own data.
    entries: list[dict[str, Any]] = [{"data": data} for data in AWKWARD_DATA]
    entries[1]["priority"] = 7
    entries[3]["group_id"] = "g,\"{}"
    entries[3]["schedule"] = {"start_after_seconds": 30}
    entries[6]["retry"] = RetryPolicy(max_attempts=3, backoff=Backoff(
        strategy=BackoffStrategy.EXPONENTIAL, factor=2))
    entries[8]["retry"] = {"max_attempts": 2, "backoff": {"strategy": "linear", "factor": 1.5}}
    entries[9]["timeout_seconds"] = 9
    results = client.add_jobs(queue="emails", jobs=entries)
    for entry, result in zip(entries, results, strict=True):
        row = job_row(db, schema, result.job_id)
        assert row["data"] == entry["data"] and type(row["data"]) is type(entry["data"])
        assert row["priority"] == entry.get("priority", 0)
        assert row["group_id"] == entry.get("group_id")
        assert row["timeout_seconds"] == entry.get("timeout_seconds")
        assert row["start_after"] == result.start_after
    rows = [job_row(db, schema, r.job_id) for r in results]
    assert rows[3]["start_after"] - rows[3]["created_at"] == timedelta(seconds=30)
    assert [(r["max_attempts"], r["backoff_strategy"], r["backoff_factor"]) for r in rows] == [
        (1, "fixed", 2.0)] * 6 + [(3, "exponential", 2.0), (1, "fixed", 2.0),
                                  (2, "linear", 1.5), (1, "fixed", 2.0)]


def test_a_batch_with_one_keyed_entry_dedups_it_and_adds_the_rest(
    client: Any, db: Db, schema: str
) -> None:
    first = client.add_job(queue="emails", data="old", idempotency_key="k")
    results = client.add_jobs(queue="emails", jobs=[
        {"data": i} for i in range(5)] + [{"data": "new", "idempotency_key": "k"}])
    assert [r.deduplicated for r in results] == [False] * 5 + [True]
    assert results[5].job_id == first.job_id
    assert count_jobs(db, schema) == 6


def test_a_row_dropped_by_a_foreign_trigger_fails_the_whole_add(
    client: Any, db: Db, schema: str
) -> None:
    # A BEFORE INSERT trigger of the application's that returns NULL makes the
    # INSERT skip the row silently; the add must not report it as added.
    db.execute(sql.SQL("""
        CREATE FUNCTION {schema}.drop_marked() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN RETURN CASE WHEN NEW.data = '"drop"' THEN NULL ELSE NEW END; END $$;
        CREATE TRIGGER drop_marked BEFORE INSERT ON {schema}.job
            FOR EACH ROW EXECUTE FUNCTION {schema}.drop_marked()""").format(
        schema=sql.Identifier(schema)))
    try:
        with pytest.raises(PortQueueError, match="1 inserted"):
            client.add_jobs(queue="emails", jobs=[{"data": "keep"}, {"data": "drop"}])
        assert count_jobs(db, schema) == 0, "the batch is one transaction: nothing is left"
        with pytest.raises(PortQueueError, match="0 inserted"):
            client.add_job(queue="emails", data="drop")
        assert client.add_job(queue="emails", data="keep").status is JobStatus.PENDING
        assert count_jobs(db, schema) == 1
    finally:
        db.execute(sql.SQL("DROP FUNCTION {}.drop_marked() CASCADE").format(
            sql.Identifier(schema)))


def test_add_jobs_rejects_recurring_entries(client: Any, db: Db, schema: str) -> None:
    for schedule in ({"start_every_seconds": 30}, {"cron": "* * * * *"}):
        with pytest.raises(ValueError, match=r"jobs\[1\]\.schedule"):
            client.add_jobs(queue="emails", jobs=[{"data": 1}, {"data": 2, "schedule": schedule}])
    assert count_jobs(db, schema) == 0
    assert count_rows(db, schema, "schedule") == 0
    assert count_rows(db, schema, "queue") == 0


def test_add_jobs_empty_list_returns_empty(client: Any, db: Db, schema: str) -> None:
    assert client.add_jobs(queue="emails", jobs=[]) == []
    assert count_rows(db, schema, "queue") == 0


def test_add_jobs_rejects_entries_with_different_tx(
    client: Any, pg_dsn: str, db: Db, schema: str
) -> None:
    with CallerTx(client, pg_dsn) as one, CallerTx(client, pg_dsn) as other:
        with pytest.raises(ValueError, match=r"jobs\[1\]\.tx"):
            client.add_jobs(queue="emails", jobs=[{"data": 1, "tx": one.tx},
                                                  {"data": 2, "tx": other.tx}])
        with pytest.raises(ValueError, match=r"jobs\[\d\]\.tx"):
            client.add_jobs(queue="emails", jobs=[{"data": 1, "tx": one.tx}, {"data": 2}])
        with pytest.raises(ValueError, match=r"\.tx"):
            client.add_jobs(queue="emails", jobs=[{"data": 1, "tx": other.tx}], tx=one.tx)
        # nothing was sent on either connection
        assert one.conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert other.conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert count_jobs(db, schema) == 0


def test_add_jobs_entries_sharing_one_tx_join_it(
    client: Any, pg_dsn: str, db: Db, schema: str
) -> None:
    with CallerTx(client, pg_dsn) as caller:
        results = client.add_jobs(queue="emails", jobs=[{"data": 1, "tx": caller.tx},
                                                        {"data": 2, "tx": caller.tx}])
        assert len(results) == 2
        assert count_jobs(db, schema) == 0, "not visible before the caller commits"
        caller.rollback()
    assert count_jobs(db, schema) == 0
    with CallerTx(client, pg_dsn) as caller:
        client.add_jobs(queue="emails", jobs=[{"data": 1, "tx": caller.tx}], tx=caller.tx)
        caller.commit()
    assert count_jobs(db, schema) == 1


# More entries than one streamed chunk: three chunks, the last a single job.
STREAMED = 2 * STREAM_CHUNK + 1


def statements_and_transactions(db: Db, schema: str, queue: str) -> tuple[int, int]:
    """How many statements (cmin) and transactions (xmin) wrote ``queue``'s jobs."""
    row = db.execute(sql.SQL(
        "SELECT count(DISTINCT cmin::text), count(DISTINCT xmin::text) FROM {} WHERE queue = %s"
    ).format(sql.Identifier(schema, "job")), [queue]).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def test_a_large_batch_streams_as_chunks_of_one_transaction(
    client: Any, db: Db, schema: str
) -> None:
    """Past STREAM_CHUNK entries, add_jobs sends one INSERT per chunk, pipelined,
    in one transaction: the results and rows are those of one statement."""
    entries: list[dict[str, Any]] = [
        {"data": {"i": i}, "priority": i % 7, "group_id": f"g{i % 3}"} for i in range(STREAMED)]
    entries[STREAM_CHUNK]["schedule"] = {"start_after_seconds": 90}
    results = client.add_jobs(queue="stream", jobs=entries)
    assert len(results) == STREAMED and len({r.job_id for r in results}) == STREAMED
    cursor = db.cursor(row_factory=psycopg.rows.dict_row)
    cursor.execute(sql.SQL(
        "SELECT id::text, data, priority, group_id, start_after, created_at FROM {} "
        "WHERE queue = %s").format(sql.Identifier(schema, "job")), ["stream"])
    rows = {row["id"]: row for row in cursor.fetchall()}
    assert len(rows) == STREAMED
    for i, result in enumerate(results):
        row = rows[result.job_id]
        assert row["data"] == {"i": i}, "results are in entry order across chunks"
        assert (row["priority"], row["group_id"]) == (i % 7, f"g{i % 3}")
        assert row["start_after"] == result.start_after
    delayed = rows[results[STREAM_CHUNK].job_id]
    assert delayed["start_after"] - delayed["created_at"] == timedelta(seconds=90)
    assert statements_and_transactions(db, schema, "stream") == (3, 1)
    # A batch of exactly one chunk stays one statement.
    client.add_jobs(queue="whole", jobs=[{"data": i} for i in range(STREAM_CHUNK)])
    assert statements_and_transactions(db, schema, "whole") == (1, 1)


def test_a_large_batch_with_a_key_is_one_statement(client: Any, db: Db, schema: str) -> None:
    """Keyed batches are not streamed: their conflict rounds look at the whole batch."""
    entries: list[dict[str, Any]] = [{"data": i} for i in range(STREAMED)]
    entries[0]["idempotency_key"] = entries[-1]["idempotency_key"] = "same"
    results = client.add_jobs(queue="keyed", jobs=entries)
    assert results[-1].deduplicated and results[-1].job_id == results[0].job_id
    assert statements_and_transactions(db, schema, "keyed") == (1, 1)
    assert count_jobs(db, schema) == STREAMED - 1


def test_a_large_batch_in_a_caller_tx_is_one_statement(
    client: Any, pg_dsn: str, db: Db, schema: str
) -> None:
    """Inside tx= nothing can be pipelined: the batch is validated, then sent whole."""
    executed: list[str] = []
    with CallerTx(client, pg_dsn, **counting_connect_kwargs(client, executed)) as caller:
        bad = [{"data": i} for i in range(STREAMED)] + [{"data": 1, "priority": "high"}]
        with pytest.raises(ValueError, match=rf"jobs\[{STREAMED}\]\.priority"):
            client.add_jobs(queue="caller", jobs=bad, tx=caller.tx)
        assert executed == [], "a bad entry anywhere stops the batch before it is sent"
        client.add_jobs(queue="caller", jobs=bad[:-1], tx=caller.tx)
        assert len(executed) == 1
        caller.commit()
    assert statements_and_transactions(db, schema, "caller") == (1, 1)


def test_a_paused_queue_refuses_a_streamed_batch_whole(client: Any, db: Db, schema: str) -> None:
    client.pause_queue(queue="held", mode=PauseMode.ALL)
    with pytest.raises(QueuePausedError):
        client.add_jobs(queue="held", jobs=[{"data": i} for i in range(STREAMED)])
    assert count_jobs(db, schema) == 0


def test_a_server_error_in_a_later_chunk_writes_nothing(client: Any, db: Db, schema: str) -> None:
    """A chunk the server refuses rolls the whole batch back, and the client's
    connection comes back from the pipeline usable. A trigger that silently
    drops rows is reported too."""
    refuse = sql.Identifier(schema, "test_refuse")
    db.execute(sql.SQL("""
        CREATE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.data ? 'boom' THEN RAISE EXCEPTION 'refused by the test trigger'; END IF;
            IF NEW.data ? 'drop' THEN RETURN NULL; END IF;
            RETURN NEW;
        END $$;
        CREATE TRIGGER test_refuse BEFORE INSERT ON {job} FOR EACH ROW EXECUTE FUNCTION {fn}();
    """).format(fn=refuse, job=sql.Identifier(schema, "job")))
    try:
        entries: list[dict[str, Any]] = [{"data": {"i": i}} for i in range(STREAMED)]
        entries[STREAM_CHUNK + 3] = {"data": {"boom": True}}
        with pytest.raises(psycopg.errors.RaiseException, match="refused by the test trigger"):
            client.add_jobs(queue="stream", jobs=entries)
        assert count_jobs(db, schema) == 0
        entries[STREAM_CHUNK + 3] = {"data": {"drop": True}}
        with pytest.raises(PortQueueError, match=f"{STREAMED} job.s. sent .* but {STREAMED - 1}"):
            client.add_jobs(queue="stream", jobs=entries)
        assert count_jobs(db, schema) == 0
        entries[STREAM_CHUNK + 3] = {"data": {"i": "again"}}
        assert len(client.add_jobs(queue="stream", jobs=entries)) == STREAMED
        assert count_jobs(db, schema) == STREAMED
    finally:
        db.execute(sql.SQL("DROP FUNCTION {} CASCADE").format(refuse))


def test_a_poll_only_client_streams_a_large_batch_too(pg_dsn: str, db: Db, schema: str) -> None:
    """poll_only (PgBouncer in transaction mode) streams as well: the pipeline is
    one transaction, which PgBouncer keeps on one server connection; the suite's
    run through PgBouncer (tests/pgbouncer) runs the streamed tests above there."""
    with PortQueue(pg_dsn, schema=schema, poll_only=True) as poll_only:
        results = poll_only.add_jobs(queue="bouncer", jobs=[{"data": i} for i in range(STREAMED)])
    assert len(results) == STREAMED
    assert statements_and_transactions(db, schema, "bouncer") == (3, 1)


def counting_connect_kwargs(client: Any, executed: list[str]) -> dict[str, Any]:
    """A cursor_factory that records every statement the caller's connection sends."""
    if is_async(client):

        class CountingAsyncCursor(psycopg.AsyncCursor[Any]):
            async def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
                executed.append(str(query))
                return await super().execute(query, params, **kwargs)

        return {"cursor_factory": CountingAsyncCursor}

    class CountingCursor(psycopg.Cursor[Any]):
        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            executed.append(str(query))
            return super().execute(query, params, **kwargs)

    return {"cursor_factory": CountingCursor}


def test_add_jobs_is_one_statement_on_the_wire(
    client: Any, pg_dsn: str, db: Db, schema: str
) -> None:
    executed: list[str] = []
    job_table = sql.Identifier(schema, "job")
    # cmin is the command (statement) number inside a transaction, per row
    statements_in_tx = sql.SQL("SELECT count(DISTINCT cmin::text), count(*) FROM {}").format(
        job_table)
    with CallerTx(client, pg_dsn, **counting_connect_kwargs(client, executed)) as caller:
        results = client.add_jobs(queue="emails", tx=caller.tx, jobs=[
            {"data": {"i": i}, "priority": i % 3, "group_id": f"g{i}"} for i in range(25)])
        assert len(executed) == 1, executed
        assert "INSERT INTO" in executed[0]
        assert caller.execute(statements_in_tx) == [(1, 25)]
        caller.commit()
    assert len(results) == 25
    assert count_jobs(db, schema) == 25
    # and both measures really count: two adds are two statements
    executed.clear()
    db.execute(sql.SQL("TRUNCATE {}").format(job_table))
    with CallerTx(client, pg_dsn, **counting_connect_kwargs(client, executed)) as caller:
        client.add_job(queue="emails", data={}, tx=caller.tx)
        client.add_job(queue="emails", data={}, tx=caller.tx)
        assert caller.execute(statements_in_tx) == [(2, 2)]
        caller.rollback()
    assert len(executed) == 3  # two adds, then the test's own SELECT
