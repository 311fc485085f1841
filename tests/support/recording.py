"""Running the client's operations with no database: a recording executor.

``portqueue.operations`` is sans-IO: an operation yields the statements it
wants run and receives their rows. ``Recording`` answers every statement with
no rows and keeps its name, so a test can show that an operation refused its
input before any statement would have reached a server. ``operation`` builds
the operation a public client method runs, from that method's own signature
(its defaults included), as both shells do.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from portqueue import InvalidArgument, PortQueue, flows, operations
from portqueue.driver import Operation, Rows, run_sync
from portqueue.queries import Batch, Query
from portqueue.settings import DEFAULT_RETENTION_SECONDS, Settings, client_settings
from portqueue.validation import DEFAULT_MAX_PAYLOAD_BYTES, batch_tx

INSTANCE_KEY = "test-host-ram-8gb"
# Never connected to: the operations below do no I/O of their own.
NOWHERE = "postgresql://x@127.0.0.1:1/x"


def settings(**overrides: Any) -> Settings:
    """A client's settings as PortQueue's defaults make them (``instance_key`` set)."""
    values: dict[str, Any] = {
        "schema": "pq_test", "instance_key": INSTANCE_KEY,
        "max_payload_bytes": DEFAULT_MAX_PAYLOAD_BYTES, "pool_min_size": 1,
        "pool_max_size": 10, "poll_only": False, "application_name": "portqueue",
        "default_retention_seconds": DEFAULT_RETENTION_SECONDS, **overrides}
    return client_settings(NOWHERE, **values)


class Recording:
    """Drives an operation, answering each statement with no rows and recording its name."""

    def __init__(self) -> None:
        self.statements: list[str] = []

    def execute(self, query: Query) -> Rows:
        self.statements.append(query.name)
        return []

    def pipelined(self, batch: Batch) -> Rows:
        return [row for query in batch.queries for row in self.execute(query)]

    def run(self, operation: Operation[Any]) -> Any:
        try:
            first = next(operation)
        except StopIteration as done:
            return done.value
        return run_sync(operation, first, self.execute, self.pipelined)


def _add_job(s: Settings, a: dict[str, Any]) -> Operation[Any]:
    options = {k: v for k, v in a.items() if k not in ("tx", "depends_on")}
    if a.get("depends_on") is not None:
        return flows.add_dependent_job(s, options, a["depends_on"])
    return operations.add_job(s, options)


def _add_jobs(s: Settings, a: dict[str, Any]) -> Operation[Any]:
    chosen = batch_tx(a["tx"], a["jobs"])  # the shell's one check before the operation
    return operations.add_job_batch(s, a["queue"], a["jobs"], streamed=chosen is None)


# Public method -> the operation its shell runs, from its bound arguments.
_OPERATIONS: dict[str, Callable[[Settings, dict[str, Any]], Operation[Any]]] = {
    "add_job": _add_job,
    "add_jobs": _add_jobs,
    "retry_job": lambda s, a: operations.retry(s, a["job_id"]),
    "cancel_job": lambda s, a: operations.cancel(s, a["job_id"]),
    "remove_job": lambda s, a: operations.remove(s, a["job_id"]),
    "remove_jobs": lambda s, a: operations.remove_many(s, a["job_ids"], a["queue"],
                                                       a["statuses"]),
    "remove_schedule": lambda s, a: operations.unschedule(s, a["schedule_id"]),
    "pause_queue": lambda s, a: operations.pause(s, a["queue"], a["mode"]),
    "resume_queue": lambda s, a: operations.resume(s, a["queue"]),
    "get_job": lambda s, a: operations.read_job(s, a["job_id"]),
    "get_jobs": lambda s, a: operations.read_jobs(s, a["queue"], a["statuses"], a["group_id"],
                                                  a["limit"], a["offset"]),
    "get_queue_stats": lambda s, a: operations.read_queue_stats(s, a["queue"]),
    "get_queues": lambda s, a: operations.read_queues(s, a["limit"], a["offset"]),
    "get_schedules": lambda s, a: operations.read_schedules(s, a["queue"], a["enabled"],
                                                            a["limit"], a["offset"]),
}
METHODS = tuple(_OPERATIONS)


def operation(method: str, client_settings: Settings | None = None,
              **kwargs: Any) -> Operation[Any]:
    """The operation ``PortQueue.<method>(**kwargs)`` runs (a TypeError for
    arguments the method does not take, as the method itself would raise)."""
    bound = inspect.signature(getattr(PortQueue, method)).bind(None, **kwargs)
    bound.apply_defaults()
    arguments = dict(bound.arguments)
    arguments.pop("self")
    return _OPERATIONS[method](client_settings or settings(), arguments)


def refused_before_io(
    method: str, client_settings: Settings | None = None, **kwargs: Any
) -> InvalidArgument | None:
    """The InvalidArgument ``PortQueue.<method>(**kwargs)`` raises before it
    would send any statement, or None when it gets as far as its first one
    (anything else it raises fails the test)."""
    running = operation(method, client_settings, **kwargs)
    try:
        first = next(running)
    except InvalidArgument as error:
        return error
    except StopIteration:
        return None  # nothing to send (an empty batch)
    running.close()
    assert isinstance(first, (Query, Batch))
    return None
