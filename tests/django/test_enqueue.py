"""Enqueueing Django tasks: atomic with the caller's transaction, options mapped
onto the job row, bad input refused before anything is written."""

from __future__ import annotations

import uuid
import zoneinfo
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

pytest.importorskip("django.tasks", reason="Django's tasks framework needs Django >= 6.0 "
                                           "(Python >= 3.12)")

from django.db import transaction
from django.tasks import TaskResultStatus, default_task_backend, task_backends
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued
from django.utils import timezone

from portqueue import JobStatus, PortQueue
from portqueue.contrib.django import PortQueueBackend
from tests.support.rows import count_jobs, fetch_one

Db = psycopg.Connection[Any]
# The shop app's modules load once Django is set up: fixtures hand them out.
Tasks = Any


def test_rollback_leaves_neither_the_order_nor_the_task(
    shop: str, orders: Any, tasks: Tasks, db: Db
) -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        order = orders.objects.create(reference="A-1")
        tasks.send_receipt.enqueue(order.pk)
        assert count_jobs(db, shop) == 0, "visible to others before the caller commits"
        raise RuntimeError("the view failed after enqueueing")
    assert count_jobs(db, shop) == 0
    assert not orders.objects.exists()


def test_commit_writes_the_task_with_the_order(
    shop: str, orders: Any, tasks: Tasks, db: Db
) -> None:
    with transaction.atomic():
        order = orders.objects.create(reference="A-2")
        result = tasks.send_receipt.enqueue(order.pk)
        assert count_jobs(db, shop) == 0
        # The caller's own reads see it (through its transaction).
        assert tasks.send_receipt.get_result(result.id).status == TaskResultStatus.READY
    row = fetch_one(db, shop, "job", "id = %s", [result.id])
    assert row is not None and row["status"] == "pending"
    assert row["data"] == {"django_task": "tests.django.shop.tasks.send_receipt",
                           "args": [order.pk], "kwargs": {}, "backend": "default"}
    assert result.status == TaskResultStatus.READY
    assert result.task == tasks.send_receipt and result.backend == "default"


def test_outside_atomic_the_task_commits_at_once(shop: str, tasks: Tasks, db: Db) -> None:
    result = tasks.add.enqueue(1, b=2)
    assert count_jobs(db, shop, "status = 'pending'") == 1
    stored = default_task_backend.get_result(result.id)
    assert (stored.status, stored.args, stored.kwargs) == (TaskResultStatus.READY, [1], {"b": 2})
    assert stored.enqueued_at is not None and stored.enqueued_at.tzinfo is not None


def test_queue_priority_and_run_after_are_the_jobs(shop: str, tasks: Tasks, db: Db) -> None:
    run_after = timezone.now() + timedelta(hours=1)
    result = tasks.send_email.using(priority=-20, run_after=run_after).enqueue("a@b.example")
    row = fetch_one(db, shop, "job", "id = %s", [result.id])
    assert row is not None
    assert (row["queue"], row["priority"]) == ("emails", -20)
    # Rounded up to a whole second on the app's clock: never early, at most ~1 s late.
    assert run_after <= row["start_after"] <= run_after + timedelta(seconds=2)
    stored = default_task_backend.get_result(result.id)
    assert stored.status == TaskResultStatus.READY
    assert stored.task.queue_name == "emails" and stored.task.priority == -20
    assert stored.task.run_after == run_after


def test_decorator_priority_is_kept(shop: str, tasks: Tasks, db: Db) -> None:
    result = tasks.send_email.enqueue("c@d.example")
    row = fetch_one(db, shop, "job", "id = %s", [result.id])
    assert row is not None and row["priority"] == 10
    assert row["start_after"] <= timezone.now()


def test_backend_retry_option_sets_the_jobs_attempts(shop: str, tasks: Tasks, db: Db) -> None:
    result = tasks.flaky.enqueue()
    row = fetch_one(db, shop, "job", "id = %s", [result.id])
    assert row is not None and row["max_attempts"] == 2
    assert task_backends["retrying"].get_result(result.id).backend == "retrying"


def test_enqueue_sends_task_enqueued(shop: str, tasks: Tasks) -> None:
    seen: list[Any] = []

    def receiver(sender: Any, task_result: Any, **kwargs: Any) -> None:
        seen.append((sender, task_result.id, task_result.status))

    task_enqueued.connect(receiver)
    try:
        result = tasks.add.enqueue(2, 2)
    finally:
        task_enqueued.disconnect(receiver)
    assert seen == [(PortQueueBackend, result.id, TaskResultStatus.READY)]


@pytest.mark.parametrize(("args", "error"), [
    ((object(), 1), TypeError),            # Django's normalize_json: not JSON
    ((float("nan"), 1), ValueError),       # portqueue: JSON cannot hold NaN
])
def test_bad_arguments_are_refused_before_writing(
    shop: str, tasks: Tasks, db: Db, args: tuple[Any, ...], error: type[Exception]
) -> None:
    with pytest.raises(error):
        tasks.add.enqueue(*args)
    assert count_jobs(db, shop) == 0


def test_django_rules_apply(shop: str, tasks: Tasks, db: Db) -> None:
    with pytest.raises(InvalidTask, match="not valid"):
        tasks.add.using(queue_name="unlisted").enqueue(1, 2)
    with pytest.raises(InvalidTask, match="priority"):
        tasks.add.using(priority=101)
    assert count_jobs(db, shop) == 0


def test_unknown_ids_do_not_exist(shop: str, pq: PortQueue) -> None:
    other = pq.add_job(queue="default", data={"not": "a task"})
    for result_id in (str(uuid.uuid4()), "not-a-uuid", other.job_id):
        with pytest.raises(TaskResultDoesNotExist):
            default_task_backend.get_result(result_id)


def test_a_cancelled_task_is_failed_with_a_reason(
    shop: str, tasks: Tasks, pq: PortQueue
) -> None:
    result = tasks.add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue(1, 1)
    pq.cancel_job(job_id=result.id)
    stored = default_task_backend.get_result(result.id)
    assert stored.status == TaskResultStatus.FAILED
    assert stored.errors[-1].exception_class.__name__ == "TaskCancelled"
    assert pq.get_job(job_id=result.id).status == JobStatus.CANCELLED  # type: ignore[union-attr]


def test_an_expired_task_is_failed_with_a_reason(shop: str, tasks: Tasks, db: Db) -> None:
    result = tasks.add.enqueue(1, 1)
    # What the expirer does to a job past its expire_in_seconds.
    db.execute(sql.SQL("UPDATE {} SET status = 'expired', finished_at = now() WHERE id = %s")
               .format(sql.Identifier(shop, "job")), [result.id])
    stored = default_task_backend.get_result(result.id)
    assert stored.status == TaskResultStatus.FAILED and stored.finished_at is not None
    assert [e.exception_class.__name__ for e in stored.errors] == ["TaskExpired"]


async def test_aenqueue_and_aget_result(shop: str, tasks: Tasks, db: Db) -> None:
    result = await tasks.double.aenqueue(21)
    assert count_jobs(db, shop) == 1
    stored = await tasks.double.aget_result(result.id)
    assert (stored.id, stored.status, stored.args) == (result.id, TaskResultStatus.READY, [21])
    with pytest.raises(TaskResultDoesNotExist):
        await default_task_backend.aget_result(str(uuid.uuid4()))


def test_naive_times_when_use_tz_is_off(shop: str, tasks: Tasks, db: Db) -> None:
    from django.test import override_settings

    with override_settings(USE_TZ=False, TIME_ZONE="America/New_York"):
        run_after = timezone.now() + timedelta(hours=2)  # naive New York time
        assert timezone.is_naive(run_after)
        result = tasks.add.using(run_after=run_after).enqueue(3, 4)
        stored = default_task_backend.get_result(result.id)
        assert stored.task.run_after == run_after
        assert stored.enqueued_at is not None and timezone.is_naive(stored.enqueued_at)
        assert abs(stored.enqueued_at - timezone.now()) < timedelta(minutes=1)
    row = fetch_one(db, shop, "job", "id = %s", [result.id])
    assert row is not None
    expected = timezone.make_aware(run_after, zoneinfo.ZoneInfo("America/New_York"))
    assert expected <= row["start_after"] <= expected + timedelta(seconds=2)
