"""How a Django task is stored in a job, and how a job reads back as a ``TaskResult``.

A task's job carries ``{"django_task": "<module path>", "args": [...],
"kwargs": {...}, "backend": "<TASKS alias>"}`` as its ``data`` (plus
``"run_after"`` when one was asked for); its queue, priority, times,
attempts, output and errors are the job's own columns. Statuses (docs/django.md
has the whole mapping): ``pending`` → READY, ``active`` → RUNNING,
``completed`` → SUCCESSFUL, ``failed``, ``cancelled`` and ``expired`` → FAILED.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.tasks.base import Task, TaskError, TaskResult, TaskResultStatus
from django.tasks.exceptions import InvalidTask
from django.utils import timezone
from django.utils.module_loading import import_string

from portqueue.contrib.django.errors import TaskCancelled, TaskExpired
from portqueue.types import JobSnapshot, JobStatus

TASK_KEY = "django_task"

STATUSES: dict[JobStatus, TaskResultStatus] = {
    JobStatus.PENDING: TaskResultStatus.READY,
    JobStatus.ACTIVE: TaskResultStatus.RUNNING,
    JobStatus.COMPLETED: TaskResultStatus.SUCCESSFUL,
    JobStatus.FAILED: TaskResultStatus.FAILED,
    JobStatus.CANCELLED: TaskResultStatus.FAILED,
    JobStatus.EXPIRED: TaskResultStatus.FAILED,
}

# Jobs that ended without an exception of their own still explain their FAILED.
_ENDED_WITHOUT_ERROR: dict[JobStatus, type[Exception]] = {
    JobStatus.CANCELLED: TaskCancelled,
    JobStatus.EXPIRED: TaskExpired,
}


def job_data(task: Task, args: list[Any], kwargs: dict[str, Any], backend: str) -> dict[str, Any]:
    """The job's ``data`` for one enqueue (``args``/``kwargs`` already JSON-normalised)."""
    data: dict[str, Any] = {
        TASK_KEY: task.module_path, "args": args, "kwargs": kwargs, "backend": backend}
    if task.run_after is not None:
        data["run_after"] = aware(task.run_after).isoformat()
    return data


def aware(moment: datetime) -> datetime:
    """A datetime Django handed us as aware: naive ones are in TIME_ZONE (USE_TZ=False)."""
    if timezone.is_naive(moment):
        made: datetime = timezone.make_aware(moment)
        return made
    return moment


def is_task_data(data: object) -> bool:
    """Whether a job's ``data`` is a Django task's (other jobs are not task results)."""
    return (
        isinstance(data, dict)
        and isinstance(data.get(TASK_KEY), str)
        and isinstance(data.get("args"), list)
        and isinstance(data.get("kwargs"), dict)
    )


def local_time(moment: datetime | None) -> datetime | None:
    """portqueue's aware UTC times as Django shows times: naive local ones when USE_TZ=False."""
    if moment is None or settings.USE_TZ:
        return moment
    naive: datetime = timezone.make_naive(moment)
    return naive


def exception_class_path(kind: type[BaseException]) -> str:
    """Django's spelling (``builtins.ValueError``), importable by ``TaskError.exception_class``."""
    return f"{kind.__module__}.{kind.__qualname__}"


def task_error(entry: dict[str, Any]) -> TaskError:
    """One of portqueue's recorded errors; it writes builtins without their module."""
    kind = str(entry.get("type") or "Exception")
    path = kind if "." in kind else f"builtins.{kind}"
    return TaskError(exception_class_path=path, traceback=str(entry.get("traceback") or ""))


def _errors(snapshot: JobSnapshot) -> list[TaskError]:
    errors = [task_error(entry) for entry in snapshot.errors]
    ended = _ENDED_WITHOUT_ERROR.get(snapshot.status)
    if ended is not None:
        errors.append(TaskError(
            exception_class_path=exception_class_path(ended),
            traceback=f"job {snapshot.job_id} ended {snapshot.status.value}\n"))
    return errors


def _task(snapshot: JobSnapshot, backend: str) -> Task:
    """The stored task, re-imported, with this job's queue, priority and run_after."""
    path = snapshot.data[TASK_KEY]
    try:
        found = import_string(path)
    except ImportError as exc:
        raise InvalidTask(f"job {snapshot.job_id}: cannot import task {path!r}: {exc}") from exc
    if not isinstance(found, Task):
        raise InvalidTask(f"job {snapshot.job_id}: {path!r} is not a Task (decorate it with @task)")
    run_after = snapshot.data.get("run_after")
    return found.using(
        priority=snapshot.priority,
        queue_name=snapshot.queue,
        run_after=local_time(datetime.fromisoformat(run_after)) if run_after else None,
        backend=backend,
    )


def task_result(snapshot: JobSnapshot, reading_backend: str) -> TaskResult:
    """The ``TaskResult`` of a task's job (``is_task_data(snapshot.data)`` must hold),
    for the backend that enqueued it (else ``reading_backend``)."""
    status = STATUSES[snapshot.status]
    backend = str(snapshot.data.get("backend") or reading_backend)
    result = TaskResult(
        task=_task(snapshot, backend),
        id=snapshot.job_id,
        status=status,
        enqueued_at=local_time(snapshot.created_at),
        # portqueue keeps the latest attempt's start only: it is both.
        started_at=local_time(snapshot.started_at),
        last_attempted_at=local_time(snapshot.started_at),
        finished_at=local_time(snapshot.finished_at),
        args=snapshot.data["args"],
        kwargs=snapshot.data["kwargs"],
        backend=backend,
        errors=_errors(snapshot),
        # One entry per attempt started, so TaskResult.attempts is the job's attempt;
        # the job row does not keep which worker ran each attempt.
        worker_ids=[f"attempt-{number}" for number in range(1, snapshot.attempt + 1)],
    )
    if status == TaskResultStatus.SUCCESSFUL:
        # A frozen dataclass field Django itself sets this way.
        object.__setattr__(result, "_return_value", snapshot.output)
    return result
