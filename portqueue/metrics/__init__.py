"""Prometheus metrics and OpenTelemetry tracing (the ``metrics`` extra).

Tracing needs no call: with ``opentelemetry-api`` installed and a
``TracerProvider`` configured, every add opens a ``PRODUCER`` span
(``send <queue>``) and every handler runs in a ``CONSUMER`` span
(``process <queue>``) whose parent is the add's, as OpenTelemetry's messaging
conventions name them (see ``portqueue.metrics.tracing``). Without
opentelemetry it costs nothing.

Prometheus metrics are attached to a client with :func:`instrument` and
served with :func:`serve`; ``portqueue worker … --metrics-port 9100`` does
both. This module imports ``prometheus_client`` only when they are called:
the client imports ``portqueue.metrics.hooks`` whether or not the extra is
installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from portqueue.metrics.tracing import TRACEPARENT

if TYPE_CHECKING:
    import threading
    from wsgiref.simple_server import WSGIServer

    from prometheus_client import CollectorRegistry

    from portqueue.async_client import AsyncPortQueue
    from portqueue.client import PortQueue
    from portqueue.metrics.prometheus import PortQueueMetrics

__all__ = ["TRACEPARENT", "instrument", "serve"]


def instrument(
    client: PortQueue | AsyncPortQueue,
    *,
    registry: CollectorRegistry | None = None,
    namespace: str = "portqueue",
    cache_seconds: float = 5.0,
    scrape_timeout_seconds: float = 5.0,
) -> PortQueueMetrics:
    """Count ``client``'s jobs in Prometheus metrics; returns them (``close()`` undoes).

    Args:
      client: a ``PortQueue`` or ``AsyncPortQueue``; its workers' events feed
        the counters and histograms, so call this before ``start()``/``run()``.
      registry: where the metrics are registered (default: prometheus_client's
        global ``REGISTRY``, what :func:`serve` exposes by default).
      namespace: the metric name prefix (default ``"portqueue"``).
      cache_seconds: how long the per-queue gauges read from the database are
        reused between scrapes (default 5).
      scrape_timeout_seconds: how long a scrape waits for that read (default
        5); past it, or when the database is unreachable, the page is served
        without the per-queue gauges (a warning is logged).

    The metrics (labels in braces) are listed in docs/metrics.md:
    ``portqueue_jobs_{added,started,completed,failed,retried,cancelled,rescued}_total{queue}``,
    ``portqueue_job_run_seconds{queue}``, ``portqueue_job_start_latency_seconds{queue}``,
    ``portqueue_queue_jobs{queue,status}``, ``portqueue_queue_oldest_pending_seconds{queue}``
    and ``portqueue_queue_paused{queue}``. Counters and histograms carry no
    ``_created`` series; prometheus_client's global setting for it is left
    alone, for your own metrics. A name already taken in ``registry`` raises
    ``ValueError`` and registers none of them.

    Note:
      Counters count what *this process* did (adds through any client of the
      process, attempts its workers ran, leases its rescuer took back); sum
      them across processes. The gauges are read from the database, so every
      instrumented process reports the same values: aggregate them with
      ``max``, not ``sum``.
    """
    from prometheus_client import REGISTRY

    from portqueue.metrics.prometheus import PortQueueMetrics

    return PortQueueMetrics(client, registry=REGISTRY if registry is None else registry,
                            namespace=namespace, cache_seconds=cache_seconds,
                            scrape_timeout_seconds=scrape_timeout_seconds)


def serve(
    port: int, *, host: str = "127.0.0.1", registry: CollectorRegistry | None = None
) -> tuple[WSGIServer, threading.Thread]:
    """Serve ``registry`` (default: the global one) at ``http://host:port/metrics``
    from a daemon thread; returns the server (``shutdown()`` stops it) and thread.

    ``host`` defaults to 127.0.0.1: expose the port on purpose (``0.0.0.0``
    inside a container), since the page names your queues. ``port=0`` picks a
    free port: read it from ``server.server_port``.
    """
    from prometheus_client import REGISTRY, start_http_server

    chosen: Any = REGISTRY if registry is None else registry
    return start_http_server(port, addr=host, registry=chosen)
