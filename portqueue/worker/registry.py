"""What a process consumes: queues with their handler and defaults, and event callbacks.

Registration is a plain call (no I/O); a worker writes the queue defaults to
the ``queue`` table when it starts.
"""

from __future__ import annotations

import dataclasses
import inspect
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from portqueue import validation
from portqueue.errors import InvalidArgument
from portqueue.types import RateLimit, Retention, RetryPolicy

EVENTS = frozenset({
    "job_started", "job_completed", "job_failed", "job_retrying", "job_cancelled",
    "job_progress", "job_rescued",
})
DEFAULT_LEASE_SECONDS = 60


@dataclass(frozen=True)
class QueueSpec:
    queue: str
    handler: Callable[..., Any]
    is_async: bool
    concurrency: int
    retry: RetryPolicy | None
    retention: Retention | None
    expire_in_seconds: int | None
    timeout_seconds: int | None
    lease_seconds: int
    dead_letter_queue: str | None
    dont_autoretry_for: tuple[type[BaseException], ...]
    # Flow control (SPEC §8): written at start only when declared.
    global_concurrency: int | None = None
    partition_concurrency: int | None = None
    rate_limit: RateLimit | None = None

    def declared_limits(self) -> dict[str, Any]:
        """The limits this declaration names, as ``set_queue_limits`` arguments."""
        declared: dict[str, Any] = {}
        if self.global_concurrency is not None:
            declared["global_concurrency"] = self.global_concurrency
        if self.partition_concurrency is not None:
            declared["partition_concurrency"] = self.partition_concurrency
        if self.rate_limit is not None:
            declared["rate_limit"] = self.rate_limit
        return declared

    def add_defaults(self) -> validation.QueueDefaults | None:
        """What this declaration fills in on jobs its client adds; None if nothing."""
        if self.retry is None and self.expire_in_seconds is None and self.timeout_seconds is None:
            return None
        return validation.QueueDefaults(self.retry, self.expire_in_seconds, self.timeout_seconds)

    def with_concurrency(self, concurrency: int) -> QueueSpec:
        return dataclasses.replace(self, concurrency=concurrency)

    def queue_row(self) -> dict[str, Any]:
        """This queue's declared defaults, as the upsert_queue parameters."""
        retry = validation.retry_columns(self.retry) if self.retry else {
            key: None for key in validation.retry_columns(RetryPolicy())}
        retention = self.retention or Retention()
        return {
            "queue": self.queue,
            "concurrency": self.concurrency,
            **retry,
            "expire_in_seconds": self.expire_in_seconds,
            "retention_ttl_seconds": retention.ttl_seconds,
            "retention_keep_completed": retention.keep_completed,
            "retention_keep_failed": retention.keep_failed,
            "timeout_seconds": self.timeout_seconds,
            "lease_seconds": self.lease_seconds,
            "dead_letter_queue": self.dead_letter_queue,
            "retention_completed_ttl_seconds": retention.completed_ttl_seconds,
            "retention_failed_ttl_seconds": retention.failed_ttl_seconds,
        }


def queue_spec(
    *,
    queue: object,
    handler: object,
    concurrency: object,
    retry: object,
    retention: object,
    expire_in_seconds: object,
    timeout_seconds: object,
    lease_seconds: object,
    dead_letter_queue: object,
    dont_autoretry_for: object,
    global_concurrency: object = None,
    partition_concurrency: object = None,
    rate_limit: object = None,
) -> QueueSpec:
    name = validation.queue_name(queue)
    if not callable(handler):
        raise InvalidArgument("handler", "must be a function taking the job")
    dead_letter = None if dead_letter_queue is None else validation.queue_name(
        dead_letter_queue, "dead_letter_queue")
    if dead_letter == name:
        # Failed copies would land on the queue that failed them, forever.
        raise InvalidArgument("dead_letter_queue", "must differ from the queue itself")
    return QueueSpec(
        queue=name,
        handler=handler,
        is_async=inspect.iscoroutinefunction(handler),
        concurrency=validation.integer("concurrency", concurrency, minimum=1, maximum=10_000),
        retry=validation.retry_policy(retry),
        retention=validation.retention(retention),
        expire_in_seconds=validation.seconds("expire_in_seconds", expire_in_seconds, minimum=1),
        timeout_seconds=validation.seconds("timeout_seconds", timeout_seconds, minimum=1),
        lease_seconds=validation.integer("lease_seconds", lease_seconds, minimum=1,
                                         maximum=24 * 3600),
        dead_letter_queue=dead_letter,
        dont_autoretry_for=_exception_types(dont_autoretry_for),
        global_concurrency=validation.limit("global_concurrency", global_concurrency),
        partition_concurrency=validation.limit("partition_concurrency", partition_concurrency),
        rate_limit=validation.rate_limit(rate_limit),
    )


def _exception_types(value: object) -> tuple[type[BaseException], ...]:
    if isinstance(value, type):
        value = (value,)
    if not isinstance(value, Sequence) or isinstance(value, (str, bytes)):
        raise InvalidArgument("dont_autoretry_for", "must be a tuple of exception classes")
    for item in value:
        if not (isinstance(item, type) and issubclass(item, BaseException)):
            raise InvalidArgument("dont_autoretry_for", f"{item!r} is not an exception class")
    return tuple(value)


class Registry:
    """Queues and event callbacks of one client; safe to register from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queues: dict[str, QueueSpec] = {}
        # Read on every add (add_defaults), without the lock: a dict lookup is
        # atomic, and a queue with no handler costs that lookup and nothing else.
        self._add_defaults: dict[str, validation.QueueDefaults] = {}
        self._callbacks: dict[str, list[Callable[..., Any]]] = {event: [] for event in EVENTS}

    def add_queue(self, spec: QueueSpec) -> None:
        with self._lock:
            if spec.queue in self._queues:
                raise InvalidArgument("queue", f"{spec.queue!r} already has a handler")
            self._queues[spec.queue] = spec
            defaults = spec.add_defaults()
            if defaults is not None:
                self._add_defaults[spec.queue] = defaults

    def add_defaults(self, queue: str) -> validation.QueueDefaults | None:
        """The options the handler of ``queue`` declares for jobs added to it."""
        return self._add_defaults.get(queue)

    def queues(self) -> Mapping[str, QueueSpec]:
        with self._lock:
            return dict(self._queues)

    def on(self, event: object, callback: object) -> None:
        if event not in EVENTS:
            raise InvalidArgument("event", f"must be one of {sorted(EVENTS)}, got {event!r}")
        if not callable(callback):
            raise InvalidArgument("callback", "must be callable")
        with self._lock:
            self._callbacks[str(event)].append(callback)

    def callbacks(self, event: str) -> list[Callable[..., Any]]:
        with self._lock:
            return list(self._callbacks[event])
