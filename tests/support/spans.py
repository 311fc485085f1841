"""Reading the spans an in-memory OpenTelemetry exporter collected."""

from __future__ import annotations

from typing import Any


def traceparent_of(span: Any) -> str:
    """The W3C traceparent a job added inside ``span`` carries."""
    context = span.get_span_context()
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def only(spans: Any, name: str) -> Any:
    """The one finished span called ``name`` (fails naming all of them otherwise)."""
    found = [s for s in spans.get_finished_spans() if s.name == name]
    assert len(found) == 1, [s.name for s in spans.get_finished_spans()]
    return found[0]
