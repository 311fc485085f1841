"""Fixtures for the metrics and tracing tests: in-process workers (from
tests/support/workers.py), a Prometheus registry of the test's own, and an
OpenTelemetry provider that records spans in memory for one test only."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from portqueue import AsyncPortQueue, PortQueue
from tests.support.workers import AsyncHarness, SyncHarness


@pytest.fixture
def harness(pq: PortQueue) -> Iterator[SyncHarness]:
    h = SyncHarness(pq)
    yield h
    h.close()


@pytest.fixture
async def aharness(apq_factory: Callable[..., AsyncPortQueue]) -> AsyncIterator[AsyncHarness]:
    h = AsyncHarness(apq_factory())
    yield h
    await h.close()


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
