"""``enqueued_at``: the TaskResult ``enqueue()`` returns carries the job row's
``created_at``, on the database clock, so it equals what ``get_result()`` and
``refresh()`` read later, and a result compares equal to its re-read."""

from __future__ import annotations

import asyncio
import dataclasses
import zoneinfo
from datetime import timedelta
from typing import Any

import psycopg
import pytest

pytest.importorskip("django.tasks", reason="Django's tasks framework needs Django >= 6.0 "
                                           "(Python >= 3.12)")

from django.db import connection, transaction
from django.tasks import TaskResultStatus
from django.test import override_settings
from django.utils import timezone

from portqueue import PortQueue
from tests.support.rows import db_now, fetch_one
from tests.support.waiting import wait_until

Db = psycopg.Connection[Any]
Tasks = Any


def test_outside_atomic_enqueued_at_is_the_rows_created_at(
    shop: str, tasks: Tasks, db: Db
) -> None:
    before = db_now(db)
    result = tasks.add.enqueue(1, 2)
    after = db_now(db)
    row = fetch_one(db, shop, "job", "id = %s", [result.id])
    assert row is not None
    assert result.enqueued_at == row["created_at"]
    assert before <= result.enqueued_at <= after
    assert tasks.add.get_result(result.id).enqueued_at == result.enqueued_at


def test_inside_atomic_enqueued_at_is_the_transactions_now(shop: str, tasks: Tasks) -> None:
    # now() is the transaction's start: earlier than any application clock
    # reading taken at enqueue(), so only the database's value can match it.
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT now()")
            (started,) = cursor.fetchone()
        result = tasks.add.enqueue(2, 3)
        assert result.enqueued_at == started
        assert tasks.add.get_result(result.id).enqueued_at == started
    assert tasks.add.get_result(result.id).enqueued_at == started


def test_a_result_equals_its_reread_until_it_changes(shop: str, tasks: Tasks) -> None:
    result = tasks.send_email.enqueue("a@example.com")
    reread = tasks.send_email.get_result(result.id)
    assert reread == result  # every field: status, times, args, backend, errors
    before = dataclasses.asdict(result)
    result.refresh()  # nothing ran: a refresh changes no field
    assert dataclasses.asdict(result) == before
    assert result.status == TaskResultStatus.READY and result.started_at is None


def test_the_async_api_reports_the_same_enqueued_at(shop: str, tasks: Tasks) -> None:
    async def enqueue_and_read() -> tuple[Any, Any]:
        result = await tasks.add.aenqueue(3, 4)
        return result, await tasks.add.aget_result(result.id)

    result, reread = asyncio.run(enqueue_and_read())
    assert reread == result and reread.enqueued_at == result.enqueued_at


def test_without_use_tz_enqueued_at_is_naive_local_time_as_get_result_reads_it(
    shop: str, tasks: Tasks, db: Db
) -> None:
    with override_settings(USE_TZ=False, TIME_ZONE="Europe/Paris"):
        result = tasks.add.enqueue(5, 6)
        assert result.enqueued_at.tzinfo is None
        assert tasks.add.get_result(result.id).enqueued_at == result.enqueued_at
    row = fetch_one(db, shop, "job", "id = %s", [result.id])
    assert row is not None
    local = row["created_at"].astimezone(zoneinfo.ZoneInfo("Europe/Paris"))
    assert result.enqueued_at == local.replace(tzinfo=None)


def test_a_deferred_task_keeps_its_enqueued_at_apart_from_its_start(
    shop: str, tasks: Tasks, db: Db
) -> None:
    before = db_now(db)
    later = tasks.add.using(run_after=timezone.now() + timedelta(hours=1), priority=7)
    result = later.enqueue(1, 1)
    assert before <= result.enqueued_at <= db_now(db)
    assert later.get_result(result.id) == result
    row = fetch_one(db, shop, "job", "id = %s", [result.id])
    assert row is not None and row["start_after"] - row["created_at"] >= timedelta(minutes=59)


def test_refresh_after_a_worker_ran_it_keeps_enqueued_at(
    worker: PortQueue, tasks: Tasks
) -> None:
    result = tasks.add.enqueue(20, 22)
    enqueued_at = result.enqueued_at

    def refreshed() -> bool:
        result.refresh()
        return bool(result.is_finished)

    wait_until(refreshed, timeout=10, what="the worker to finish the task")
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 42
    assert result.enqueued_at == enqueued_at
    assert enqueued_at <= result.started_at <= result.finished_at  # type: ignore[operator]


def test_arefresh_changes_no_field_of_a_pending_task(shop: str, tasks: Tasks) -> None:
    async def enqueue_and_refresh() -> tuple[dict[str, Any], Any]:
        result = await tasks.double.aenqueue(2)
        before = dataclasses.asdict(result)
        await result.arefresh()
        return before, result

    before, result = asyncio.run(enqueue_and_refresh())
    assert dataclasses.asdict(result) == before
