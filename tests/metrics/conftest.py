"""Fixtures for the metrics and tracing tests: a Prometheus registry of the
test's own, and an OpenTelemetry provider that records spans in memory for one
test only. The in-process worker fixtures (``harness``, ``aharness``) come
from tests/conftest.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture
def spans() -> Iterator[Any]:
    """Spans portqueue records during the test, kept in memory. The provider
    is portqueue's alone (never OpenTelemetry's global one), so other tests
    in this process add jobs without any trace context."""
    sdk_trace = pytest.importorskip("opentelemetry.sdk.trace")
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from portqueue.metrics import tracing

    exporter = InMemorySpanExporter()
    provider = sdk_trace.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use_tracer_provider(provider)
    try:
        yield exporter
    finally:
        tracing.use_tracer_provider(None)
        provider.shutdown()
