"""OpenTelemetry spans for adding and running jobs, when opentelemetry is installed.

The spans follow OpenTelemetry's messaging semantic conventions: an add opens a
``PRODUCER`` span named ``send <queue>``; its W3C trace context is stored in
each added job's ``attrs`` under the reserved key ``"traceparent"``. The worker
reads it back with the claim and runs the handler inside a ``CONSUMER`` span
named ``process <queue>`` whose parent is that add span, so a trace follows a
job from the request that added it to the handler that ran it, across
processes and hosts. A span whose operation raised carries ``error.type``.

Without the ``opentelemetry-api`` package, ``TRACING`` is ``False`` and the
helpers here are never called (see ``hooks``); with the API but no
TracerProvider configured, ``recording()`` is ``False`` and neither are they.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from psycopg.conninfo import conninfo_to_dict

from portqueue.types import AddJobResult

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
# The conventions' operation types; each span's operation name is its type.
SEND = "send"
PROCESS = "process"
DEFAULT_PORT = 5432


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


@functools.lru_cache(maxsize=64)
def server_attributes(dsn: str | None) -> Mapping[str, str | int]:
    """``server.address`` and ``server.port`` of the database ``dsn`` names, as
    libpq would resolve them without a network call: the DSN's ``host`` (a
    name, an IP or a Unix socket directory), else its ``hostaddr``, else
    ``PGHOST``; the port from the DSN, else ``PGPORT``, else 5432. Empty when
    no host is named, or several are (which one answers is known only once
    connected). Cached: a client parses its DSN once, not per add."""
    if not dsn:
        return {}
    try:
        params = conninfo_to_dict(dsn)
    except Exception:  # the client validated it; never fail an add over a span
        return {}
    host = str(params.get("host") or params.get("hostaddr") or os.environ.get("PGHOST") or "")
    port = str(params.get("port") or os.environ.get("PGPORT") or DEFAULT_PORT)
    if not host or "," in host or "," in port or not port.isdigit():
        return {}
    return {"server.address": host, "server.port": int(port)}


def error_type(exc: BaseException) -> str:
    """The exception's class name as the job's error record spells it:
    qualified by its module unless built in (``ValueError``, ``myapp.Flaky``)."""
    kind = type(exc)
    if kind.__module__ == "builtins":
        return kind.__qualname__
    return f"{kind.__module__}.{kind.__qualname__}"


@contextlib.contextmanager
def _span(name: str, kind: Any, attributes: Mapping[str, Any],
          context: Any = None) -> Iterator[Any]:
    """A current span that marks an exception escaping it (``Exception`` or not:
    a cancelled handler too) with ``error.type``, the error status and an event."""
    with _tracer().start_as_current_span(
            name, context=context, kind=kind, attributes=attributes,
            record_exception=False, set_status_on_exception=False) as span:
        try:
            yield span
        except BaseException as exc:
            if span.is_recording():
                span.set_attribute("error.type", error_type(exc))
                span.record_exception(exc)
                description = f"{type(exc).__name__}: {exc}"
                span.set_status(trace.Status(trace.StatusCode.ERROR, description))
            raise


@contextlib.contextmanager
def add_span(queue: object, dsn: str | None = None) -> Iterator[tuple[Any, dict[str, str] | None]]:
    """A PRODUCER span around one add (or batch), and the attrs carrying its
    context. ``queue`` ``None``: an add to several queues (a flow across
    queues), a span named ``send`` without a destination, as the conventions
    name an operation whose destination is not one."""
    attributes = {"messaging.system": SYSTEM, "messaging.operation.type": SEND,
                  "messaging.operation.name": SEND, **server_attributes(dsn)}
    if queue is not None:
        attributes["messaging.destination.name"] = str(queue)
    name = SEND if queue is None else f"{SEND} {queue}"
    with _span(name, trace.SpanKind.PRODUCER, attributes) as span:
        carrier: dict[str, str] = {}
        if span.get_span_context().is_valid:
            TraceContextTextMapPropagator().inject(carrier)
        attrs = {TRACEPARENT: carrier[TRACEPARENT]} if TRACEPARENT in carrier else None
        yield span, attrs


def record_added(span: Any, results: Sequence[AddJobResult], batch: bool) -> None:
    """Name what an add did on its span. ``add_job`` is a single-message
    operation: the job's id (the existing job's, when deduplicated), and no
    batch count, as the conventions ask; ``add_jobs`` is a batch one: the
    count of entries (deduplicated ones included), and no single id."""
    if not span.is_recording():
        return
    deduplicated = sum(r.deduplicated for r in results)
    if batch:
        span.set_attribute("messaging.batch.message_count", len(results))
        span.set_attribute("portqueue.deduplicated_count", deduplicated)
        return
    for result in results:  # one; a recurring add has a schedule, not a job
        if result.job_id is not None:
            span.set_attribute("messaging.message.id", result.job_id)
            span.set_attribute("portqueue.deduplicated", result.deduplicated)


@contextlib.contextmanager
def run_span(queue: str, job_id: str, attempt: int, traceparent: str | None,
             dsn: str | None = None) -> Iterator[None]:
    """A CONSUMER span around one handler call, child of the add span that
    ``traceparent`` names (a new trace when the job carries none). The handler
    runs inside it: spans it opens are its children. An exception the handler
    raises is recorded on the span, names its ``error.type`` and marks it as
    an error."""
    parent = None
    if traceparent:
        parent = TraceContextTextMapPropagator().extract({TRACEPARENT: traceparent})
    attributes: Mapping[str, Any] = {
        "messaging.system": SYSTEM, "messaging.operation.type": PROCESS,
        "messaging.operation.name": PROCESS, "messaging.destination.name": queue,
        "messaging.message.id": job_id, "portqueue.job.attempt": attempt,
        **server_attributes(dsn)}
    with _span(f"{PROCESS} {queue}", trace.SpanKind.CONSUMER, attributes, context=parent):
        yield
