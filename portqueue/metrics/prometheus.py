"""Prometheus metrics for a portqueue client and its workers.

Counters and histograms are fed by the worker's events (``pq.on``) and by
``hooks`` (jobs added, leases rescued); the per-queue gauges are read from the
database at scrape time through the public read API, cached briefly so that
several scrapers (or a dashboard refreshing) cost one read per interval.
The counters and histograms are served without ``_created`` samples
(``WithoutCreated``), leaving prometheus_client's global setting alone.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from datetime import datetime
from typing import Any

import psycopg
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from portqueue.async_client import AsyncPortQueue
from portqueue.client import PortQueue
from portqueue.errors import PortQueueError
from portqueue.metrics import hooks
from portqueue.types import JobSnapshot, JobStatus, QueueStats

log = logging.getLogger("portqueue.metrics")

DEFAULT_CACHE_SECONDS = 5.0
DEFAULT_SCRAPE_TIMEOUT_SECONDS = 5.0
# Handlers run from milliseconds to an hour.
RUN_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
               300.0, 900.0, 3600.0)
# A woken worker starts a job within milliseconds; a backlog makes it minutes.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                   10.0, 30.0, 60.0, 300.0)
# Every queue is read per scrape; past this many the rest are left out.
MAX_QUEUES = 1000
PAGE = 500
_FRACTION = re.compile(r"\.(\d+)")

EVENT_COUNTERS = {
    "job_started": ("jobs_started", "Attempts started by this process's workers."),
    "job_completed": ("jobs_completed", "Jobs this process's workers completed."),
    "job_failed": ("jobs_failed", "Jobs that ended failed (attempts exhausted) here."),
    "job_retrying": ("jobs_retried", "Failed attempts here that will run again."),
    "job_cancelled": ("jobs_cancelled", "Jobs that ended cancelled here (run or cancelled)."),
}


def _seconds(later: datetime | None, earlier: datetime | None) -> float | None:
    if later is None or earlier is None:
        return None
    return max((later - earlier).total_seconds(), 0.0)


def start_latency(snapshot: JobSnapshot) -> float | None:
    """Commit-to-start of the attempt that just started: from when it became
    eligible to ``started_at``. Eligible is the latest of ``created_at``,
    ``start_after`` (a delayed job, a retry's backoff, a re-armed job, a job an
    aborting worker released: the release moves it) and the
    ``at`` of the newest error recorded before the start: a rescued job went
    back to pending then, and its earlier attempt's run and lapsed lease are
    not this attempt's wait. (An error after the start is this attempt's own.)"""
    if snapshot.started_at is None:
        return None
    eligible = max(snapshot.created_at, snapshot.start_after)
    for error in reversed(snapshot.errors):
        at = error.get("at")
        ended = _timestamp(str(at)) if at is not None else None
        if ended is not None and ended <= snapshot.started_at:
            eligible = max(eligible, ended)
            break
    return _seconds(snapshot.started_at, eligible)


def run_time(snapshot: JobSnapshot, error: dict[str, Any] | None = None) -> float | None:
    """How long the attempt that just ended ran, on the database clock. A
    retried attempt ends at its error's ``at``; if the job was claimed again
    before the event was read, that attempt's start is gone and None is returned."""
    if snapshot.finished_at is not None:
        return _seconds(snapshot.finished_at, snapshot.started_at)
    attempt = error.get("attempt") if error else None
    last = snapshot.errors[-1] if snapshot.errors else None
    if last is None or attempt != snapshot.attempt or last.get("attempt") != attempt:
        return None
    return _seconds(_timestamp(str(last["at"])), snapshot.started_at)


def _timestamp(text: str) -> datetime:
    """A timestamptz as jsonb renders it; the fraction padded to six digits,
    the only length Python 3.10's fromisoformat reads besides three."""
    match = _FRACTION.search(text)
    if match:
        text = f"{text[:match.start(1)]}{match.group(1)[:6].ljust(6, '0')}{text[match.end(1):]}"
    return datetime.fromisoformat(text)


class QueueReader:
    """The per-queue statistics, read through the public API and cached.

    A read runs on a thread of its own and a scrape waits for it at most
    ``timeout`` seconds: with the database unreachable, the client's pool
    would otherwise hold the scrape for its 30 s connection timeout, past
    Prometheus's scrape timeout, and the counters would be lost with it."""

    def __init__(self, client: PortQueue | AsyncPortQueue, cache_seconds: float,
                 timeout: float) -> None:
        # A client of its own, one connection at most: scrapes arrive on the
        # HTTP server's thread, and an async client belongs to its loop. An
        # async one's reads run on a loop of the reader's one thread.
        derived = client.with_settings(
            pool_min_size=0, pool_max_size=1, application_name="portqueue-metrics")
        self._client: PortQueue | None = None
        self._async: tuple[AsyncPortQueue, asyncio.AbstractEventLoop] | None = None
        if isinstance(derived, AsyncPortQueue):
            self._async = (derived, asyncio.new_event_loop())
        else:
            self._client = derived
        self._cache_seconds = cache_seconds
        self._timeout = timeout
        self._lock = threading.Lock()
        self._read_at = float("-inf")
        self._stats: list[QueueStats] = []
        self._reading: Future[list[QueueStats]] | None = None
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="portqueue-metrics")

    def stats(self) -> list[QueueStats]:
        """Fresh enough statistics; raises what the read raised, or
        ``concurrent.futures.TimeoutError`` when it takes too long."""
        with self._lock:
            if time.monotonic() - self._read_at < self._cache_seconds:
                return self._stats
            if self._reading is None:
                # One read at a time: scrapes during a slow read share it.
                self._reading = self._thread.submit(self._read)
            reading = self._reading
        try:
            stats = reading.result(timeout=self._timeout)
        finally:
            with self._lock:
                if reading.done() and self._reading is reading:
                    self._reading = None
        with self._lock:
            self._stats, self._read_at = stats, time.monotonic()
        return stats

    def _read(self) -> list[QueueStats]:
        if self._async is not None:
            client, loop = self._async
            return loop.run_until_complete(self._read_async(client))
        if self._client is None:
            return []
        names: list[str] = []
        while len(names) < MAX_QUEUES:
            page = self._client.get_queues(limit=PAGE, offset=len(names))
            names += [info.queue for info in page.items]
            if len(page.items) < PAGE:
                break
        return [self._client.get_queue_stats(queue=name) for name in names[:MAX_QUEUES]]

    @staticmethod
    async def _read_async(client: AsyncPortQueue) -> list[QueueStats]:
        names: list[str] = []
        while len(names) < MAX_QUEUES:
            page = await client.get_queues(limit=PAGE, offset=len(names))
            names += [info.queue for info in page.items]
            if len(page.items) < PAGE:
                break
        return [await client.get_queue_stats(queue=name) for name in names[:MAX_QUEUES]]

    def close(self) -> None:
        if self._async is not None:
            # Closed on the reader's thread, after any read in progress: the
            # pool and the loop belong to it.
            self._thread.submit(self._close_async, *self._async)
            self._thread.shutdown(wait=False)
            return
        self._thread.shutdown(wait=False, cancel_futures=True)
        if self._client is not None:
            self._client.close()

    @staticmethod
    def _close_async(client: AsyncPortQueue, loop: asyncio.AbstractEventLoop) -> None:
        try:
            loop.run_until_complete(client.aclose())
        finally:
            loop.close()


class QueueCollector(Collector):
    """The per-queue gauges: ``portqueue_queue_jobs{queue,status}``,
    ``portqueue_queue_oldest_pending_seconds`` and ``portqueue_queue_paused``."""

    def __init__(self, reader: QueueReader, namespace: str) -> None:
        self._reader = reader
        self._namespace = namespace

    def describe(self) -> list[Metric]:
        # Declared without reading the database, so registering never blocks.
        return list(self._families())

    def collect(self) -> Iterator[Metric]:
        try:
            stats = self._reader.stats()
        except (psycopg.Error, PortQueueError, FutureTimeout) as exc:
            # The counters are still served; the gauges' absence shows the gap.
            log.warning("metrics: reading queue statistics failed: %r", exc)
            stats = []
        return iter(self._families(stats))

    def _families(self, stats: Sequence[QueueStats] = ()) -> tuple[Metric, ...]:
        depth = GaugeMetricFamily(
            f"{self._namespace}_queue_jobs", "Jobs in the queue by status (from the database).",
            labels=["queue", "status"])
        oldest = GaugeMetricFamily(
            f"{self._namespace}_queue_oldest_pending_seconds",
            "How long the oldest ready pending job has waited (0 when none).", labels=["queue"])
        paused = GaugeMetricFamily(
            f"{self._namespace}_queue_paused", "1 when the queue is paused (any mode).",
            labels=["queue"])
        for stat in stats:
            for status in JobStatus:
                depth.add_metric([stat.queue, status.value], stat.counts.get(status, 0))
            oldest.add_metric([stat.queue], stat.oldest_pending_seconds or 0.0)
            paused.add_metric([stat.queue], 0.0 if stat.paused is None else 1.0)
        return depth, oldest, paused


class WithoutCreated(Collector):
    """portqueue's counters and histograms, served without their ``_created``
    samples. They are registered through this collector, not one by one, so
    the user's own metrics keep prometheus_client's setting
    (``disable_created_metrics()``, ``PROMETHEUS_DISABLE_CREATED_SERIES``)
    whatever it is: turning it off globally would change them too."""

    def __init__(self, metrics: Sequence[Counter | Histogram]) -> None:
        self._metrics = tuple(metrics)

    def describe(self) -> list[Metric]:
        return [family for metric in self._metrics for family in metric.describe()]

    def collect(self) -> Iterator[Metric]:
        for metric in self._metrics:
            for family in metric.collect():
                created = f"{family.name}_created"
                kept = Metric(family.name, family.documentation, family.type, family.unit)
                kept.samples = [sample for sample in family.samples if sample.name != created]
                yield kept


class PortQueueMetrics:
    """Prometheus metrics for ``client``; see ``portqueue.metrics.instrument``."""

    def __init__(self, client: PortQueue | AsyncPortQueue, *,
                 registry: CollectorRegistry = REGISTRY, namespace: str = "portqueue",
                 cache_seconds: float = DEFAULT_CACHE_SECONDS,
                 scrape_timeout_seconds: float = DEFAULT_SCRAPE_TIMEOUT_SECONDS) -> None:
        self.registry = registry
        self._closed = False
        self.counters = {
            event: Counter(f"{namespace}_{name}", text, ["queue"], registry=None)
            for event, (name, text) in EVENT_COUNTERS.items()}
        self.added = Counter(f"{namespace}_jobs_added", "Jobs added by this process's clients.",
                             ["queue"], registry=None)
        self.rescued = Counter(f"{namespace}_jobs_rescued",
                               "Lapsed leases this process's rescuer took back.",
                               ["queue"], registry=None)
        self.run_seconds = Histogram(
            f"{namespace}_job_run_seconds", "How long each attempt ran (database clock).",
            ["queue"], buckets=RUN_BUCKETS, registry=None)
        self.start_latency_seconds = Histogram(
            f"{namespace}_job_start_latency_seconds",
            "Commit-to-start: from when the attempt became eligible to started_at.",
            ["queue"], buckets=LATENCY_BUCKETS, registry=None)
        self._counted = WithoutCreated([*self.counters.values(), self.added, self.rescued,
                                        self.run_seconds, self.start_latency_seconds])
        registry.register(self._counted)
        self._reader = QueueReader(client, cache_seconds, scrape_timeout_seconds)
        self._collector = QueueCollector(self._reader, namespace)
        try:
            registry.register(self._collector)
        except ValueError:  # a name taken: leave nothing registered behind
            registry.unregister(self._counted)
            self._reader.close()
            raise
        self._undo = [hooks.observe_added(self._count(self.added)),
                      hooks.observe_rescued(self._count(self.rescued))]
        for event in EVENT_COUNTERS:
            client.on(event, self._on_event(event))

    def _count(self, counter: Counter) -> Callable[[str, int], None]:
        def observe(queue: str, count: int) -> None:
            if not self._closed:
                counter.labels(queue).inc(count)
        return observe

    def _on_event(self, event: str) -> Callable[..., None]:
        counter = self.counters[event]

        def callback(snapshot: JobSnapshot, error: dict[str, Any] | None = None) -> None:
            if self._closed:
                return
            counter.labels(snapshot.queue).inc()
            if event == "job_started":
                seconds = start_latency(snapshot)
                histogram = self.start_latency_seconds
            else:
                seconds = run_time(snapshot, error)
                histogram = self.run_seconds
            if seconds is not None:
                histogram.labels(snapshot.queue).observe(seconds)
        return callback

    def close(self) -> None:
        """Stop counting, unregister every metric and close the reader's pool.
        (Event callbacks stay registered on the client, as no-ops.)"""
        if self._closed:
            return
        self._closed = True
        for undo in self._undo:
            undo()
        self.registry.unregister(self._collector)
        self.registry.unregister(self._counted)
        self._reader.close()
