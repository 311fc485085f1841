"""portqueue's counters and histograms are served without prometheus_client's
``_created`` series, in the text format and in OpenMetrics, while the user's
own metrics in the same registry keep prometheus_client's setting."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from portqueue.metrics import instrument
from tests.support.waiting import wait_until
from tests.support.workers import SyncHarness, finished_row

Db = psycopg.Connection[Any]


def names(exposition: bytes) -> set[str]:
    """Every sample name on a scraped page."""
    return {line.split("{")[0].split(" ")[0] for line in exposition.decode().splitlines()
            if line and not line.startswith("#")}


@pytest.mark.parametrize("generate", [generate_latest, generate_openmetrics],
                         ids=["text", "openmetrics"])
def test_portqueue_metrics_have_no_created_series_and_the_users_keep_theirs(
    harness: SyncHarness, db: Db, schema: str, generate: Any
) -> None:
    pq = harness.pq
    registry = CollectorRegistry()
    mine = Counter("myapp_orders", "The user's own counter.", registry=registry)
    mine.inc()
    metrics = instrument(pq, registry=registry, cache_seconds=0)
    try:
        # A second's delay before the retry: the failed attempt's event reads
        # the job before it is claimed again, so its run time is observed
        # (run_time() cannot time an attempt whose start was overwritten).
        @pq.handler("created-series", retry={"max_attempts": 2, "delay_seconds": 1})
        def handler(job: Any) -> None:
            if job.attempt == 1:
                raise RuntimeError("once")

        harness.start()
        job_id = pq.add_job(queue="created-series", data={}).job_id
        assert job_id
        wait_until(lambda: finished_row(db, schema, job_id), timeout=15,
                   what="the job to finish")
        labels = {"queue": "created-series"}
        wait_until(lambda: registry.get_sample_value("portqueue_job_run_seconds_count",
                                                     labels) == 2, what="both attempts")
        page = generate(registry)
        served = names(page)
        # Every kind of metric portqueue serves has samples on the page ...
        for name in ("portqueue_jobs_added_total", "portqueue_jobs_started_total",
                     "portqueue_jobs_retried_total", "portqueue_jobs_completed_total",
                     "portqueue_job_run_seconds_count", "portqueue_job_start_latency_seconds_sum",
                     "portqueue_queue_jobs"):
            assert name in served, name
        # ... and none of them a _created one; the user's counter keeps its own.
        assert not [name for name in served
                    if name.startswith("portqueue_") and name.endswith("_created")]
        assert "myapp_orders_created" in served
    finally:
        metrics.close()
    assert names(generate(registry)) == {"myapp_orders_total", "myapp_orders_created"}


def test_a_name_taken_in_the_registry_leaves_nothing_of_portqueue_registered(
    harness: SyncHarness,
) -> None:
    registry = CollectorRegistry()
    # Taken by the gauges' collector, registered after the counters.
    Gauge("portqueue_queue_paused", "The user's own.", registry=registry)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        instrument(harness.pq, registry=registry)
    assert [family.name for family in registry.collect()] == ["portqueue_queue_paused"]
    # And once free, a second instrument() over the first is refused the same way.
    registry = CollectorRegistry()
    first = instrument(harness.pq, registry=registry)
    try:
        with pytest.raises(ValueError, match="Duplicated timeseries"):
            instrument(harness.pq, registry=registry)
    finally:
        first.close()
    assert list(registry.collect()) == []
