"""Declaring schedules from code at every deploy (issue 18, item 6): a
recurring add with ``schedule.key`` names its schedule within the queue, and
adding it again updates that one schedule instead of adding a second, on
both clients. The next tick moves only when the timing changed."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from portqueue import DeduplicationReason, PauseMode, QueuePausedError
from tests.support.rows import count_rows, fetch_one, schedule_row

Db = psycopg.Connection[Any]
CRON = {"pattern": "0 8 * * 1-5", "tz": "Europe/Paris"}


def test_declaring_a_schedule_twice_keeps_one(client: Any, db: Db, schema: str) -> None:
    first = client.add_job(queue="reports", data={"kind": "daily"},
                           schedule={"cron": CRON, "key": "weekday-report"})
    assert first.schedule_id is not None and first.deduplicated is False
    again = client.add_job(queue="reports", data={"kind": "daily"},
                           schedule={"cron": CRON, "key": "weekday-report"})
    assert again.schedule_id == first.schedule_id and again.next_run_at == first.next_run_at
    assert (again.deduplicated, again.deduplication_reason) == (
        True, DeduplicationReason.IDEMPOTENCY)
    assert count_rows(db, schema, "schedule") == 1
    # The same name on another queue is another schedule.
    other = client.add_job(queue="exports", data={}, schedule={"cron": CRON,
                                                               "key": "weekday-report"})
    assert other.schedule_id != first.schedule_id
    info = client.get_schedules(queue="reports").items[0]
    assert info.idempotency_key == "weekday-report"


def test_a_changed_declaration_updates_the_schedule(client: Any, db: Db, schema: str) -> None:
    first = client.add_job(queue="reports", data={"v": 1}, priority=1,
                           schedule={"start_every_seconds": 3600, "key": "hourly"})
    # A later deploy changes the data and options, not the timing: the next
    # tick stays where it was (an interval must not be postponed by deploys).
    db.execute(f'UPDATE "{schema}".schedule SET next_run_at = next_run_at - interval '  # noqa: S608
               "'30 minutes' WHERE id = %s", [first.schedule_id])
    due = schedule_row(db, schema, first.schedule_id)["next_run_at"]
    changed = client.add_job(queue="reports", data={"v": 2}, priority=5,
                             retry={"max_attempts": 3},
                             schedule={"start_every_seconds": 3600, "key": "hourly"})
    row = schedule_row(db, schema, first.schedule_id)
    assert changed.schedule_id == first.schedule_id and changed.next_run_at == due
    assert (row["data"], row["next_run_at"]) == ({"v": 2}, due)
    assert (row["job_options"]["priority"], row["job_options"]["max_attempts"]) == (5, 3)

    # A new timing (here cron instead of an interval) takes its own next tick.
    retimed = client.add_job(queue="reports", data={"v": 2},
                             schedule={"cron": "*/5 * * * *", "key": "hourly"})
    row = schedule_row(db, schema, first.schedule_id)
    assert (row["cron"], row["every_seconds"], row["tz"]) == ("*/5 * * * *", None, "UTC")
    assert row["next_run_at"] == retimed.next_run_at != due
    assert retimed.next_run_at.minute % 5 == 0
    assert count_rows(db, schema, "schedule") == 1


@pytest.mark.parametrize(("options", "named"), [
    ({"schedule": {"start_after_seconds": 5, "key": "k"}}, "schedule.key"),
    ({"schedule": {"start_every_seconds": 5, "key": ""}}, "schedule.key"),
    ({"schedule": {"start_every_seconds": 5, "key": 7}}, "schedule.key"),
    ({"schedule": {"start_every_seconds": 5, "key": "k"}, "idempotency_key": "other"},
     "idempotency_key"),
])
def test_bad_keys_are_refused_before_anything_is_written(
    client: Any, db: Db, schema: str, options: dict[str, Any], named: str
) -> None:
    with pytest.raises(ValueError, match=named):
        client.add_job(queue="reports", data={}, **options)
    assert count_rows(db, schema, "schedule") == 0 and count_rows(db, schema, "queue") == 0


def test_the_same_key_as_idempotency_key_is_one_identity(client: Any, db: Db,
                                                         schema: str) -> None:
    plain = client.add_job(queue="reports", data={"v": 1}, idempotency_key="nightly",
                           schedule={"cron": "0 2 * * *"})
    declared = client.add_job(queue="reports", data={"v": 2}, idempotency_key="nightly",
                              schedule={"cron": "0 2 * * *", "key": "nightly"})
    assert declared.schedule_id == plain.schedule_id
    assert schedule_row(db, schema, plain.schedule_id)["data"] == {"v": 2}


def test_a_queue_paused_for_adds_refuses_a_declaration(client: Any, db: Db,
                                                       schema: str) -> None:
    client.add_job(queue="reports", data={"v": 1}, schedule={"cron": "0 2 * * *",
                                                             "key": "nightly"})
    client.pause_queue(queue="reports", mode=PauseMode.ALL)
    with pytest.raises(QueuePausedError):
        client.add_job(queue="reports", data={"v": 2}, schedule={"cron": "0 2 * * *",
                                                                 "key": "nightly"})
    assert fetch_one(db, schema, "schedule", "true")["data"] == {"v": 1}  # type: ignore[index]
