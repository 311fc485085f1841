"""Prometheus: scrape the real HTTP endpoint after real jobs ran on a real
worker. Counters are exact, histograms count every attempt, and the gauges
equal what the database holds."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from portqueue import JobStatus, PortQueue
from portqueue.metrics import instrument, serve
from portqueue.metrics.prometheus import PortQueueMetrics, run_time, start_latency
from tests.support.snapshots import snapshot
from tests.support.waiting import wait_until
from tests.support.workers import SyncHarness

Db = psycopg.Connection[Any]
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


class Scraper:
    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}/metrics"

    def __call__(self) -> Samples:
        with urllib.request.urlopen(self.url, timeout=5) as response:
            assert response.status == 200
            text = response.read().decode()
        return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
                for family in text_string_to_metric_families(text)
                for sample in family.samples}

    def value(self, name: str, **labels: str) -> float | None:
        return self().get((name, tuple(sorted(labels.items()))))


@pytest.fixture
def metrics(pq: PortQueue) -> Iterator[tuple[PortQueueMetrics, Scraper]]:
    registry = CollectorRegistry()
    instrumented = instrument(pq, registry=registry, cache_seconds=0)
    server, thread = serve(0, registry=registry)
    try:
        yield instrumented, Scraper(server.server_port)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
        instrumented.close()


class Flaky(Exception):
    pass


def db_counts(db: Db, schema: str) -> dict[tuple[str, str], int]:
    rows = db.execute(
        f"SELECT queue, status::text, count(*) FROM {schema}.job "  # noqa: S608
        "GROUP BY queue, status").fetchall()
    return {(queue, status): count for queue, status, count in rows}


def test_counters_histograms_and_gauges_after_real_jobs(
    harness: SyncHarness, metrics: tuple[PortQueueMetrics, Scraper], db: Db, schema: str
) -> None:
    pq = harness.pq
    _, scrape = metrics
    pq.create_queue(queue="m-ok", handler=lambda job: job.data)

    @pq.handler("m-flaky", retry={"max_attempts": 2, "delay_seconds": 1})
    def flaky(job: Any) -> str:
        if job.attempt == 1:
            raise Flaky("first attempt")
        return "second"

    @pq.handler("m-bad", retry={"max_attempts": 2, "delay_seconds": 1})
    def bad(job: Any) -> None:
        raise Flaky("always")

    # A lease that lapsed in a worker that died: the rescuer takes it back.
    lost = pq.add_job(queue="m-lost", data={}).job_id
    db.execute(f"UPDATE {schema}.job SET status = 'active', attempt = 1, "  # noqa: S608
               "started_at = now(), lease_token = 1, "
               "lease_expires_at = now() - interval '1 second' WHERE id = %s", [lost])
    harness.start(maintenance=True)
    pq.add_jobs(queue="m-ok", jobs=[{"data": n} for n in range(4)])
    for _ in range(2):  # the second add is deduplicated: not counted
        pq.add_job(queue="m-ok", data="key", idempotency_key="once")
    pq.add_jobs(queue="m-flaky", jobs=[{"data": 1}, {"data": 2}])
    pq.add_job(queue="m-bad", data={})
    pq.add_job(queue="m-idle", data={})                                   # no handler: waits
    pq.add_job(queue="m-idle", data={}, schedule={"start_after_seconds": 3600})  # delayed

    expected = {
        ("portqueue_jobs_added_total", "m-ok"): 5, ("portqueue_jobs_added_total", "m-flaky"): 2,
        ("portqueue_jobs_added_total", "m-bad"): 1, ("portqueue_jobs_added_total", "m-idle"): 2,
        ("portqueue_jobs_added_total", "m-lost"): 1,
        ("portqueue_jobs_started_total", "m-ok"): 5, ("portqueue_jobs_completed_total", "m-ok"): 5,
        ("portqueue_jobs_started_total", "m-flaky"): 4,
        ("portqueue_jobs_retried_total", "m-flaky"): 2,
        ("portqueue_jobs_completed_total", "m-flaky"): 2,
        ("portqueue_jobs_started_total", "m-bad"): 2, ("portqueue_jobs_retried_total", "m-bad"): 1,
        ("portqueue_jobs_failed_total", "m-bad"): 1,
        ("portqueue_jobs_rescued_total", "m-lost"): 1,
    }

    def counted() -> dict[tuple[str, str], float]:
        samples = scrape()
        return {key: samples.get((key[0], (("queue", key[1]),)), 0.0) for key in expected}

    wait_until(lambda: counted() == expected, timeout=15, what="every counter")
    samples = scrape()
    # Nothing counted twice, nothing else counted: every counter sample is one
    # of the expected ones (a label set appears once it is first counted).
    counters = {(name, dict(labels)["queue"]): value for (name, labels), value in samples.items()
                if name.startswith("portqueue_jobs_") and name.endswith("_total")}
    assert counters == expected

    def histogram_count(name: str, queue: str) -> float:
        return samples[(f"{name}_count", (("queue", queue),))]

    # One run time per attempt that ended, one start latency per attempt started.
    assert histogram_count("portqueue_job_run_seconds", "m-ok") == 5
    assert histogram_count("portqueue_job_run_seconds", "m-flaky") == 4
    assert histogram_count("portqueue_job_run_seconds", "m-bad") == 2
    assert histogram_count("portqueue_job_start_latency_seconds", "m-ok") == 5
    assert histogram_count("portqueue_job_start_latency_seconds", "m-flaky") == 4
    inf_bucket = (("le", "+Inf"), ("queue", "m-ok"))
    assert samples[("portqueue_job_run_seconds_bucket", inf_bucket)] == 5
    # Retries waited out their one-second delay before starting again, and
    # the start latency is measured from start_after: well under that delay.
    assert samples[("portqueue_job_start_latency_seconds_sum", (("queue", "m-flaky"),))] < 4

    # Gauges: what the database holds, every status of every queue.
    in_db = db_counts(db, schema)
    queues = {queue for queue, _ in in_db}
    assert queues == {"m-ok", "m-flaky", "m-bad", "m-idle", "m-lost"}
    for queue in queues:
        for status in JobStatus:
            key = ("portqueue_queue_jobs", (("queue", queue), ("status", status.value)))
            assert samples[key] == in_db.get((queue, status.value), 0), key
    assert in_db[("m-idle", "pending")] == 2 and in_db[("m-ok", "completed")] == 5
    waited = samples[("portqueue_queue_oldest_pending_seconds", (("queue", "m-idle"),))]
    stats = pq.get_queue_stats(queue="m-idle")
    assert stats.oldest_pending_seconds is not None
    assert 0 < waited <= stats.oldest_pending_seconds
    assert samples[("portqueue_queue_oldest_pending_seconds", (("queue", "m-ok"),))] == 0
    assert samples[("portqueue_queue_paused", (("queue", "m-ok"),))] == 0


def test_gauges_are_cached_between_scrapes(pq: PortQueue, db: Db, schema: str) -> None:
    registry = CollectorRegistry()
    instrumented = instrument(pq, registry=registry, cache_seconds=3600)
    try:
        pq.add_job(queue="cached", data={})
        key = ("cached", "pending")

        def pending() -> float | None:
            return registry.get_sample_value("portqueue_queue_jobs",
                                             {"queue": key[0], "status": key[1]})

        assert pending() == 1
        pq.add_job(queue="cached", data={})
        assert pending() == 1  # the cached read, not a second query
        assert db_counts(db, schema)[key] == 2
        pq.pause_queue(queue="cached")
        assert registry.get_sample_value("portqueue_queue_paused", {"queue": "cached"}) == 0
    finally:
        instrumented.close()
    # Closed: unregistered, and adds are no longer counted anywhere.
    assert registry.get_sample_value("portqueue_jobs_added_total", {"queue": "cached"}) is None
    pq.add_job(queue="cached", data={})


def test_a_database_outage_leaves_the_counters_scrapable(pq: PortQueue) -> None:
    registry = CollectorRegistry()
    # A client on a server that does not answer: the gauges are skipped, the
    # rest of the page is served.
    broken = PortQueue("postgresql://nobody@127.0.0.1:1/none?connect_timeout=1",
                       schema=pq.schema)
    instrumented = instrument(broken, registry=registry, cache_seconds=0,
                              scrape_timeout_seconds=0.2)
    try:
        started = time.monotonic()
        page = generate_latest(registry).decode()
        assert time.monotonic() - started < 5  # not the pool's 30 s wait
        assert "# TYPE portqueue_jobs_added_total counter" in page
        assert "portqueue_queue_jobs{" not in page
    finally:
        instrumented.close()
        broken.close()


def test_latency_counts_from_the_later_of_created_at_and_start_after() -> None:
    assert start_latency(snapshot(started_at=0.25)) == 0.25
    # Delayed (or retried after a backoff): counted from start_after.
    assert start_latency(snapshot(start_after=10.0, started_at=10.5)) == 0.5
    assert start_latency(snapshot()) is None


def test_run_time_of_a_retried_attempt_ends_at_its_error() -> None:
    ended = snapshot(started_at=1.0, finished_at=3.5)
    assert run_time(ended) == 2.5
    at = "2026-01-01T00:00:02.12345+00:00"  # jsonb's five fractional digits
    retried = snapshot(started_at=1.0, status=JobStatus.PENDING,
                       errors=[{"attempt": 1, "at": at}])
    assert run_time(retried, {"attempt": 1}) == pytest.approx(1.12345)
    # Claimed again before the event was read: that attempt's start is gone.
    again = snapshot(started_at=5.0, attempt=2, errors=[{"attempt": 1, "at": at}])
    assert run_time(again, {"attempt": 1}) is None
