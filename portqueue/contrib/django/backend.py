"""``PortQueueBackend``: Django's tasks framework (``django.tasks``) on portqueue.

Configure it in ``settings.TASKS``::

    TASKS = {"default": {
        "BACKEND": "portqueue.contrib.django.PortQueueBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {"SCHEMA": "portqueue"},
    }}

Options (all optional): ``DATABASE`` (default ``"default"``), the Django
database whose ``transaction.atomic()`` blocks enqueues join; ``DSN`` (default:
that database's own settings), the connection string for reading results and
for workers; ``SCHEMA`` (default ``"portqueue"``); ``RETRY``, a portqueue retry
policy for every task's job (default: the queue's, else one attempt); ``CLIENT``,
further ``PortQueue`` settings (``pool_max_size``, ``instance_key``, …).

Caveats: inside ``atomic()`` the job is written in the caller's transaction
(not ``on_commit``): it exists if and only if that transaction commits. Outside
one, the job is committed at once in a transaction of its own. ``run_after`` is
turned into a delay on the application's clock, rounded up to whole seconds.
"""

from __future__ import annotations

import json
import math
import threading
from datetime import datetime
from datetime import timezone as dt_timezone
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import connections, transaction
from django.db.backends.base.base import NO_DB_ALIAS
from django.db.backends.signals import connection_created
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import Task, TaskResult, TaskResultStatus
from django.tasks.exceptions import TaskResultDoesNotExist
from django.tasks.signals import task_enqueued
from django.utils.json import normalize_json

from portqueue.client import PortQueue
from portqueue.contrib.django.options import (
    BackendOptions,
    CurrentOptions,
    backend_options,
    check_queues,
)
from portqueue.contrib.django.results import (
    aware,
    is_task_data,
    job_data,
    local_time,
    task_result,
)
from portqueue.errors import InvalidArgument
from portqueue.operations import added_job_id
from portqueue.tx import from_django
from portqueue.types import AddJobResult, Schedule

_clients: dict[str, PortQueue] = {}
_clients_lock = threading.Lock()


def shared_client(options: BackendOptions) -> PortQueue:
    """One client (one pool) per configuration for the whole process.

    Django builds a backend per thread; a pool each would hold a connection
    per web server thread for nothing."""
    key = json.dumps([options.dsn, options.schema, options.client], sort_keys=True, default=repr)
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = new_client(options)
            _clients[key] = client
        return client


def close_shared_clients() -> None:
    """Close the pools of the backends' shared clients (at shutdown, or between tests);
    a later use opens a new one. Django's creation and removal of a test
    database call it (close_before_database_ddl)."""
    with _clients_lock:
        clients = list(_clients.values())
        _clients.clear()
    for client in clients:
        client.close()


def close_before_database_ddl(sender: Any, connection: Any, **kwargs: Any) -> None:
    """Close the shared pools when Django opens its connection without a database.

    Django opens that connection (alias ``NO_DB_ALIAS``) to create, clone and
    drop test databases. PostgreSQL refuses DROP DATABASE, and CREATE DATABASE
    from a template, while another session is connected to that database
    ("is being accessed by other users"): the pool's would be. (django.contrib.postgres
    tells that connection apart by the same alias.)"""
    if connection.alias == NO_DB_ALIAS:
        close_shared_clients()


# Connected when the backend is imported, which any pool's creation needs:
# no INSTALLED_APPS entry or test-runner setting to forget.
connection_created.connect(close_before_database_ddl,
                           dispatch_uid="portqueue.contrib.django.close_before_database_ddl")


def new_client(options: BackendOptions) -> PortQueue:
    """A client of the backend's settings; bad ``CLIENT`` entries are reported by name."""
    try:
        return PortQueue(options.dsn, schema=options.schema, **options.client)
    except (TypeError, InvalidArgument) as exc:
        raise ImproperlyConfigured(
            f"TASKS[{options.alias!r}]['OPTIONS']['CLIENT']: {exc}") from None


def start_after(run_after: datetime | None) -> Schedule | None:
    """``run_after`` as the whole-second delay portqueue takes (rounded up: never early)."""
    if run_after is None:
        return None
    seconds = math.ceil((aware(run_after) - datetime.now(dt_timezone.utc)).total_seconds())
    return Schedule(start_after_seconds=seconds) if seconds > 0 else None


class PortQueueBackend(BaseTaskBackend):  # type: ignore[misc]  # Django ships no type hints
    """A ``django.tasks`` backend storing each task as a portqueue job.

    Supports deferring (``run_after``), priorities (Django's -100..100 is stored
    as is: higher runs first, as in both), async task functions and results
    read from any process (``get_result``)."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        check_queues(alias, params)
        super().__init__(alias, params)
        self.settings = backend_options(alias, params)
        # The settings with the DSN of Django's database as it is named now.
        self.current_settings = CurrentOptions(self.settings)
        shared_client(self.settings)  # a bad CLIENT is reported now, not at first use

    @property
    def client(self) -> PortQueue:
        """The process's shared client for these settings, looked up at each use:
        after ``close_shared_clients()`` the next use opens a new pool, on the
        database Django's settings name then (the test database during tests)."""
        return shared_client(self.current_settings())

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        """Add the task's job; inside ``atomic()`` it commits or rolls back with it."""
        self.validate_task(task)
        # Django's own normalisation: its TypeError/ValueError for values JSON cannot hold.
        args, kwargs = normalize_json(args), normalize_json(kwargs)
        added = self._add(task, job_data(task, args, kwargs, self.alias))
        result = TaskResult(
            task=task, id=added_job_id(added), status=TaskResultStatus.READY,
            # The row's created_at, as get_result() reads it: the database's clock.
            enqueued_at=local_time(added.created_at), started_at=None,
            finished_at=None, last_attempted_at=None, args=args, kwargs=kwargs, backend=self.alias,
            errors=[], worker_ids=[],
        )
        task_enqueued.send(type(self), task_result=result)
        return result

    def _add(self, task: Task, data: dict[str, Any]) -> AddJobResult:
        using = self.settings.database

        def add() -> AddJobResult:
            return self.client.add_job(
                queue=task.queue_name, data=data, priority=task.priority,
                schedule=start_after(task.run_after), retry=self.settings.retry,
                tx=from_django(using))

        if connections[using].in_atomic_block:
            return add()
        # Autocommit: the insert gets a transaction of its own on the same
        # connection, committed when this block exits. (Inside the caller's
        # block above, no savepoint is taken: the job simply joins it.)
        with transaction.atomic(using=using):
            return add()

    def get_result(self, result_id: str) -> TaskResult:
        """The task's result as stored now, from any process; ``TaskResultDoesNotExist``
        for an id that is not a task's job (unknown, malformed, or another job).
        Inside ``atomic()`` it reads through the caller's transaction."""
        using = self.settings.database
        # Inside atomic() read on the caller's connection: it sees the tasks it
        # enqueued and has not committed yet, as every later read of its own would.
        tx = from_django(using) if connections[using].in_atomic_block else None
        try:
            snapshot = self.client.get_job(job_id=result_id, tx=tx)
        except InvalidArgument:
            raise TaskResultDoesNotExist(result_id) from None
        if snapshot is None or not is_task_data(snapshot.data):
            raise TaskResultDoesNotExist(result_id)
        return task_result(snapshot, self.alias)
