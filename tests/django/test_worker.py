"""Django tasks run by real portqueue workers: in-process (``worker_client``), as
``manage.py portqueue_worker`` and as ``portqueue worker …django.worker:app``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("django.tasks", reason="Django's tasks framework needs Django >= 6.0 "
                                           "(Python >= 3.12)")

from django.db import transaction
from django.tasks import TaskResult, TaskResultStatus, default_task_backend
from django.tasks.exceptions import TaskResultDoesNotExist
from django.tasks.signals import task_finished, task_started

from portqueue import PortQueue
from tests.support.waiting import wait_until

Tasks = Any
REPO = Path(__file__).resolve().parents[2]


def finished(result_id: str, timeout: float = 10.0) -> TaskResult:
    """The task's result once a worker has finished it (read as any process would)."""
    def read() -> TaskResult | None:
        result = default_task_backend.get_result(result_id)
        return result if result.is_finished else None

    return wait_until(read, timeout=timeout, what=f"task {result_id} to finish")


def test_committed_task_runs_and_its_result_is_readable(
    worker: PortQueue, orders: Any, tasks: Tasks
) -> None:
    with transaction.atomic():
        order = orders.objects.create(reference="B-1")
        enqueued = tasks.send_receipt.enqueue(order.pk)
    result = finished(enqueued.id)
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == {"order_id": order.pk, "updated": 1}
    assert orders.objects.get(pk=order.pk).receipt_sent
    assert result.attempts == 1 and result.errors == []
    assert result.enqueued_at <= result.started_at <= result.finished_at  # type: ignore[operator]
    assert result.last_attempted_at == result.started_at


def test_rolled_back_task_never_runs(worker: PortQueue, orders: Any, tasks: Tasks) -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        order = orders.objects.create(reference="B-2")
        rolled_back = tasks.send_receipt.enqueue(order.pk)
        raise RuntimeError("rolled back")
    committed = tasks.add.enqueue(1, 1)
    assert finished(committed.id).return_value == 2  # the worker is up and has drained
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(rolled_back.id)
    assert not orders.objects.exists()


def test_raising_task_fails_with_its_error(worker: PortQueue, tasks: Tasks) -> None:
    result = finished(tasks.charge.enqueue("B-3").id)
    assert result.status == TaskResultStatus.FAILED
    (error,) = result.errors
    assert error.exception_class is tasks.PaymentDeclined
    assert "card declined for B-3" in error.traceback and "Traceback" in error.traceback
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value  # noqa: B018


def test_context_async_tasks_and_retries(worker: PortQueue, tasks: Tasks) -> None:
    described = tasks.describe_attempt.enqueue(label="x")
    doubled = tasks.double.enqueue(21)
    flaky = tasks.flaky.enqueue()  # the "retrying" backend: two attempts
    assert finished(described.id).return_value == {
        "label": "x", "attempt": 1, "id": described.id}
    assert finished(doubled.id).return_value == 42
    retried = finished(flaky.id)
    assert retried.return_value == "succeeded on attempt 2"
    assert retried.attempts == 2
    assert [e.exception_class for e in retried.errors] == [ConnectionError]


def test_worker_sends_started_and_finished(worker: PortQueue, tasks: Tasks) -> None:
    seen: list[tuple[str, str, TaskResultStatus]] = []

    def on_started(sender: Any, task_result: TaskResult, **kwargs: Any) -> None:
        seen.append(("started", task_result.id, task_result.status))

    def on_finished(sender: Any, task_result: TaskResult, **kwargs: Any) -> None:
        seen.append(("finished", task_result.id, task_result.status))

    task_started.connect(on_started)
    task_finished.connect(on_finished)
    try:
        ok = tasks.add.enqueue(2, 3)
        bad = tasks.charge.enqueue("B-4")
        finished(ok.id)
        finished(bad.id)
    finally:
        task_started.disconnect(on_started)
        task_finished.disconnect(on_finished)
    assert sorted(seen) == sorted([
        ("started", ok.id, TaskResultStatus.RUNNING), ("finished", ok.id, "SUCCESSFUL"),
        ("started", bad.id, TaskResultStatus.RUNNING), ("finished", bad.id, "FAILED")])


def test_priority_orders_the_claims(shop: str, tasks: Tasks) -> None:
    from django.tasks import task_backends

    from portqueue.contrib.django.runner import worker_client

    low = tasks.send_email.using(priority=-5).enqueue("low@x.example")
    high = tasks.send_email.using(priority=50).enqueue("high@x.example")
    client = worker_client(task_backends["default"], queues=["emails"], concurrency=1)
    client.start(scheduler=False, maintenance=False, poll_interval=0.5)
    try:
        low_result, high_result = finished(low.id), finished(high.id)
    finally:
        client.stop(abort=True)
        client.close()
    assert high_result.started_at < low_result.started_at  # type: ignore[operator]


# --- the two ways to run a worker process ---


@pytest.fixture
def project_env(shop: str, pg_dsn: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("PORTQUEUE_")}
    env.update(PORTQUEUE_DJANGO_DSN=pg_dsn, PORTQUEUE_DJANGO_SCHEMA=shop,
               DJANGO_SETTINGS_MODULE="tests.django.project.settings",
               PYTHONPATH=str(REPO))
    return env


@pytest.fixture
def run_process(project_env: dict[str, str]) -> Iterator[Any]:
    started: list[subprocess.Popen[str]] = []

    def run(*command: str) -> subprocess.Popen[str]:
        process = subprocess.Popen(command, cwd=REPO, env=project_env, text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        started.append(process)
        return process

    yield run
    for process in started:
        if process.poll() is None:
            process.kill()
            process.communicate()


def _drains_on_sigterm(process: subprocess.Popen[str], tasks: Tasks) -> str:
    enqueued = tasks.add.enqueue(20, 22)

    def done_or_exited() -> bool:
        return process.poll() is not None or default_task_backend.get_result(
            enqueued.id).is_finished

    wait_until(done_or_exited, timeout=30, what="the worker process to run the task")
    assert process.poll() is None, process.communicate()[0]
    assert default_task_backend.get_result(enqueued.id).return_value == 42
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=30)
    assert process.returncode == 0, output
    return output


@pytest.mark.slow
def test_manage_py_portqueue_worker(run_process: Any, tasks: Tasks) -> None:
    process = run_process(sys.executable, "tests/django/manage.py", "portqueue_worker",
                          "--queues", "default", "--concurrency", "2", "--no-scheduler")
    _drains_on_sigterm(process, tasks)


@pytest.mark.slow
def test_portqueue_worker_entry_object(run_process: Any, tasks: Tasks) -> None:
    process = run_process(sys.executable, "-m", "portqueue.cli", "worker",
                          "portqueue.contrib.django.worker:app", "--queues", "default",
                          "--no-maintenance")
    _drains_on_sigterm(process, tasks)


def test_manage_py_refuses_unknown_queues(shop: str) -> None:
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match=r"\['nowhere'\] are not in TASKS\['default'\]"):
        call_command("portqueue_worker", queues="nowhere")
    with pytest.raises(CommandError, match="concurrency"):
        call_command("portqueue_worker", concurrency=0)
