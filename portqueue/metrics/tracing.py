"""OpenTelemetry spans for adding and running jobs, when opentelemetry is installed.

An add opens a ``PRODUCER`` span named ``portqueue add <queue>``; its W3C trace
context is stored in each added job's ``attrs`` under the reserved key
``"traceparent"``. The worker reads it back with the claim and runs the
handler inside a ``CONSUMER`` span named ``portqueue run <queue>`` whose parent
is that add span, so a trace follows a job from the request that added it to
the handler that ran it, across processes and hosts.

Without the ``opentelemetry-api`` package, ``TRACING`` is ``False`` and the
helpers here are never called (see ``hooks``); with the API but no
TracerProvider configured, ``recording()`` is ``False`` and neither are they.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

try:
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # the optional extra is not installed: tracing stays off
    TRACING = False
else:
    TRACING = True

# The attrs key holding an added job's trace context; reserved for portqueue.
TRACEPARENT = "traceparent"
SYSTEM = "portqueue"


_provider: Any = None


def use_tracer_provider(provider: Any) -> None:
    """Trace with ``provider`` instead of OpenTelemetry's global one (``None``
    goes back to the global one): for an application that keeps a provider of
    its own, and for tests."""
    global _provider
    _provider = provider


def recording() -> bool:
    """Whether spans can be recorded: a TracerProvider is configured (an SDK's,
    not OpenTelemetry's default proxy or no-op one). Without one, portqueue
    opens no span at all, not even a non-recording one, and stores nothing."""
    provider = _provider if _provider is not None else trace.get_tracer_provider()
    return not isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider))


def _tracer() -> Any:
    # Asked per span, not at import: the application may configure its
    # TracerProvider after importing portqueue.
    return trace.get_tracer("portqueue", tracer_provider=_provider)


@contextlib.contextmanager
def add_span(queue: object) -> Iterator[tuple[Any, dict[str, str] | None]]:
    """A PRODUCER span around one add (or batch), and the attrs carrying its context."""
    attributes = {"messaging.system": SYSTEM, "messaging.operation.type": "send",
                  "messaging.operation.name": "add",
                  "messaging.destination.name": str(queue)}
    with _tracer().start_as_current_span(
            f"portqueue add {queue}", kind=trace.SpanKind.PRODUCER,
            attributes=attributes) as span:
        carrier: dict[str, str] = {}
        if span.get_span_context().is_valid:
            TraceContextTextMapPropagator().inject(carrier)
        attrs = {TRACEPARENT: carrier[TRACEPARENT]} if TRACEPARENT in carrier else None
        yield span, attrs


def record_added(span: Any, job_ids: list[str], deduplicated: int) -> None:
    """Name the added jobs on the add span."""
    if not span.is_recording():
        return
    if len(job_ids) == 1:
        span.set_attribute("messaging.message.id", job_ids[0])
    span.set_attribute("messaging.batch.message_count", len(job_ids) + deduplicated)
    span.set_attribute("portqueue.deduplicated_count", deduplicated)


@contextlib.contextmanager
def run_span(queue: str, job_id: str, attempt: int,
             traceparent: str | None) -> Iterator[None]:
    """A CONSUMER span around one handler call, child of the add span that
    ``traceparent`` names (a new trace when the job carries none). The handler
    runs inside it: spans it opens are its children. An exception the handler
    raises is recorded on the span and marks it as an error."""
    parent = None
    if traceparent:
        parent = TraceContextTextMapPropagator().extract({TRACEPARENT: traceparent})
    attributes: Mapping[str, Any] = {
        "messaging.system": SYSTEM, "messaging.operation.type": "process",
        "messaging.operation.name": "run", "messaging.destination.name": queue,
        "messaging.message.id": job_id, "portqueue.job.attempt": attempt}
    with _tracer().start_as_current_span(
            f"portqueue run {queue}", context=parent, kind=trace.SpanKind.CONSUMER,
            attributes=attributes):
        yield
