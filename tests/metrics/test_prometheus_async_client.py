"""The Prometheus reader of an ``AsyncPortQueue``: its gauges come from a
client derived with ``with_settings`` (one connection, read on a loop of the
reader's own thread, never the application's loop), and closing the metrics
closes that client's pool."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
from prometheus_client import CollectorRegistry

from portqueue import AsyncPortQueue
from portqueue.metrics import instrument
from tests.support.waiting import wait_until


def _reader_sessions(db: psycopg.Connection[Any]) -> int:
    row = db.execute("SELECT count(*) FROM pg_stat_activity "
                     "WHERE application_name = 'portqueue-metrics:client'").fetchone()
    return int(row[0]) if row else 0


def test_an_async_clients_gauges_are_read_on_the_readers_own_loop(
    pg_dsn: str, schema: str, db: psycopg.Connection[Any],
) -> None:
    registry = CollectorRegistry()

    async def main() -> None:
        async with AsyncPortQueue(pg_dsn, schema=schema) as apq:
            instrumented = instrument(apq, registry=registry, cache_seconds=0)
            try:
                await apq.add_job(queue="gauged", data={})
                # A scrape blocks its thread: here, a thread of its own, as the
                # HTTP server's would be, while this loop goes on.
                pending = await asyncio.to_thread(
                    registry.get_sample_value, "portqueue_queue_jobs",
                    {"queue": "gauged", "status": "pending"})
                assert pending == 1
                assert _reader_sessions(db) == 1
            finally:
                instrumented.close()

    asyncio.run(main())
    wait_until(lambda: _reader_sessions(db) == 0, 10, "the reader's pool to close")
