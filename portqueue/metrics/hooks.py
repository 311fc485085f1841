"""The seam the client, the worker and the lease rescuer call to be observed.

Three calls, each a no-op unless something listens:

- ``adding(queue, dsn, batch=…)`` wraps every ``add_job`` / ``add_jobs`` (with
  dependencies or without), ``add_flow`` and ``publish``: it opens the
  add span (when opentelemetry is installed), hands out the ``attrs`` that
  carry its trace context to the job rows, and reports the jobs added to
  the observers (``portqueue.metrics`` counts them);
- ``running(claimed, traced, dsn)`` wraps every handler call in the run span;
- ``jobs_rescued(queues)`` reports leases the rescuer took back.

Worker events (``pq.on``) carry everything else the metrics count. This
module sits below the client: it imports only ``portqueue.types`` and
``tracing``, never the client, the worker or prometheus_client.
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

from portqueue.metrics import tracing
from portqueue.types import AddJobResult

log = logging.getLogger("portqueue.metrics")

# An observer receives a queue name and how many jobs it concerns.
Observer = Callable[[str, int], None]

_added: list[Observer] = []
_rescued: list[Observer] = []
_UNTRACED: contextlib.nullcontext[None] = contextlib.nullcontext()


def observe_added(observer: Observer) -> Callable[[], None]:
    """Call ``observer(queue, count)`` for jobs added by this process's clients
    (deduplicated adds and recurring schedules excluded); returns the undo."""
    return _subscribe(_added, observer)


def observe_rescued(observer: Observer) -> Callable[[], None]:
    """Call ``observer(queue, count)`` for lapsed leases this process's rescuer
    took back; returns the undo."""
    return _subscribe(_rescued, observer)


def _subscribe(observers: list[Observer], observer: Observer) -> Callable[[], None]:
    observers.append(observer)
    return lambda: observers.remove(observer) if observer in observers else None


def _notify(observers: list[Observer], counts: Counter[str]) -> None:
    for observer in list(observers):
        for queue, count in counts.items():
            try:
                observer(queue, count)
            except Exception:  # a metrics bug must never fail an add or a rescue
                log.exception("metrics observer %r raised", observer)


class AddScope:
    """One add in progress, a context manager around it: ``attrs`` to store on
    its rows (the trace context, or ``None``), and ``added(results)`` to call
    with what it returned."""

    __slots__ = ("_batch", "_opening", "_span", "attrs")

    def __init__(self, queue: object, traced: bool, dsn: str | None = None,
                 batch: bool = False) -> None:
        self._opening = tracing.add_span(queue, dsn) if traced else None
        self._batch = batch
        self._span: Any = None
        self.attrs: dict[str, str] | None = None

    def __enter__(self) -> AddScope:
        if self._opening is not None:
            self._span, self.attrs = self._opening.__enter__()
        return self

    def __exit__(self, *exc_info: Any) -> bool | None:
        if self._opening is not None:
            return self._opening.__exit__(*exc_info)
        return None

    def added(self, results: Sequence[AddJobResult]) -> None:
        if self._span is not None:
            tracing.record_added(self._span, results, self._batch)
        if _added:
            new = Counter(r.queue for r in results if r.job_id is not None and not r.deduplicated)
            if new:
                _notify(_added, new)


# Holds no state of its own: one serves every untraced add, in any thread.
_UNTRACED_ADD = AddScope(None, traced=False)


def adding(queue: object, dsn: str | None = None, *, batch: bool = False) -> AddScope:
    """The scope of one ``add_job`` (``batch=False``) or ``add_jobs``,
    ``add_flow`` or ``publish`` (``batch=True``) call: ``with hooks.adding(q,
    settings.dsn) as scope``. ``queue``: ``None`` for a flow across queues
    (``publish`` names its topic). ``dsn`` names the server on the span
    (``server.address``/``server.port``)."""
    if tracing.TRACING and tracing.recording():
        return AddScope(queue, traced=True, dsn=dsn, batch=batch)
    return _UNTRACED_ADD


class ClaimedJob(Protocol):
    @property
    def id(self) -> str: ...
    @property
    def queue(self) -> str: ...
    @property
    def attempt(self) -> int: ...
    @property
    def traceparent(self) -> str | None: ...


def tracing_on() -> bool:
    """Whether a tracer records now. The worker asks once per claim, not per
    job: without a configured provider, OpenTelemetry reads the environment
    on every call."""
    return tracing.TRACING and tracing.recording()


def running(claimed: ClaimedJob, traced: bool,
            dsn: str | None = None) -> contextlib.AbstractContextManager[None]:
    """The span a handler runs in; nothing at all unless ``traced`` (``tracing_on()``).
    ``dsn`` (the worker's) names the server on the span."""
    if not traced:
        return _UNTRACED
    return tracing.run_span(claimed.queue, claimed.id, claimed.attempt, claimed.traceparent,
                            dsn)


def jobs_rescued(queues: Iterable[str]) -> None:
    """The rescuer took back one lapsed lease per item of ``queues``."""
    if _rescued:
        counts = Counter(queues)
        if counts:
            _notify(_rescued, counts)
