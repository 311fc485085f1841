"""Running Django tasks in portqueue workers.

``worker_client(backend)`` returns a ``PortQueue`` whose handlers run the
backend's tasks, one handler per queue. It is what ``manage.py
portqueue_worker`` runs, and what ``portqueue worker
portqueue.contrib.django.worker:app`` loads. The handler re-imports the task by
its module path, calls it (with a ``TaskContext`` first when
``takes_context``), returns its JSON-normalised value as the job's ``output``,
and re-raises its exception so portqueue retries or fails the job as its retry
policy says. ``task_started`` and ``task_finished`` are sent around each call.
"""

from __future__ import annotations

from collections.abc import Sequence
from traceback import format_exception
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import close_old_connections
from django.tasks.base import TaskContext, TaskError, TaskResult, TaskResultStatus
from django.tasks.signals import task_finished, task_started
from django.utils import timezone
from django.utils.json import normalize_json

from portqueue import Job
from portqueue.client import PortQueue
from portqueue.contrib.django.backend import PortQueueBackend, new_client
from portqueue.contrib.django.results import exception_class_path


def _settle(result: TaskResult, status: TaskResultStatus, **fields: Any) -> None:
    # TaskResult is frozen; Django's own backends update it this way too.
    object.__setattr__(result, "status", status)
    object.__setattr__(result, "finished_at", timezone.now())
    for name, value in fields.items():
        object.__setattr__(result, name, value)


def _call(result: TaskResult) -> Any:
    task = result.task
    args = [TaskContext(task_result=result), *result.args] if task.takes_context else result.args
    # Async task functions run to completion here, in the handler's thread.
    return normalize_json(task.call(*args, **result.kwargs))


def run_task(backend: PortQueueBackend, job: Job) -> Any:
    """Run the task stored in ``job``; its return value becomes the job's output.

    The signals' ``task_result`` is read from the row just claimed (RUNNING),
    then updated in memory: ``task_finished`` is sent before the worker records
    the outcome, and once per attempt when the job is retried."""
    result = backend.get_result(job.id)
    # As around a request: a task must not inherit a broken or stale connection
    # of this thread, nor leave one open past CONN_MAX_AGE.
    close_old_connections()
    try:
        task_started.send(sender=type(backend), task_result=result)
        try:
            value = _call(result)
        except Exception as exc:
            error = TaskError(exception_class_path=exception_class_path(type(exc)),
                              traceback="".join(format_exception(exc)))
            _settle(result, TaskResultStatus.FAILED, errors=[*result.errors, error])
            task_finished.send(sender=type(backend), task_result=result)
            raise
        _settle(result, TaskResultStatus.SUCCESSFUL, _return_value=value)
        task_finished.send(sender=type(backend), task_result=result)
        return value
    finally:
        close_old_connections()


def worker_queues(backend: PortQueueBackend, queues: Sequence[str] | None) -> list[str]:
    """The queues to consume: ``queues``, else the backend's ``QUEUES``."""
    alias = backend.alias
    chosen = sorted(backend.queues) if queues is None else list(queues)
    if not chosen:
        raise ImproperlyConfigured(
            f"TASKS[{alias!r}]['QUEUES'] is empty (tasks may use any queue): "
            "name the queues this worker consumes")
    unknown = [queue for queue in chosen if backend.queues and queue not in backend.queues]
    if unknown:
        raise ImproperlyConfigured(
            f"queues {unknown} are not in TASKS[{alias!r}]['QUEUES'] {sorted(backend.queues)}")
    return chosen


def worker_client(
    backend: PortQueueBackend, *, queues: Sequence[str] | None = None, concurrency: int = 1
) -> PortQueue:
    """A new ``PortQueue`` (its own pool) whose handlers run ``backend``'s tasks.

    ``queues`` defaults to the backend's ``QUEUES``; ``concurrency`` (default 1)
    is per queue. Run it with ``.run()`` (blocks; SIGTERM drains) or ``.start()``."""
    client = new_client(backend.current_settings())

    def run_django_task(job: Job) -> Any:
        return run_task(backend, job)

    for queue in worker_queues(backend, queues):
        client.create_queue(queue=queue, handler=run_django_task, concurrency=concurrency)
    return client
