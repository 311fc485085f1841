"""Running in-process workers in tests, and always stopping them.

``SyncHarness`` wraps a ``PortQueue`` (its worker runs on a thread) and
``AsyncHarness`` an ``AsyncPortQueue`` (its worker runs on the test's loop).
Both hand out *gates*: events a handler blocks on so the test decides when it
returns. Closing a harness opens every gate, then stops the worker with
``abort=True``, so no handler thread or task outlives its test.

Workers start with maintenance and the scheduler off (tests that need the
rescuer turn it on) and a short poll interval as a safety net; the wake-up
tests set their own.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import psycopg

from portqueue import AsyncPortQueue, PortQueue
from tests.support.rows import fetch_one
from tests.support.waiting import wait_until, wait_until_async

Db = psycopg.Connection[Any]

# A handler blocked on a gate gives up after this long, so a failing test
# cannot leave a thread behind for longer than that.
GATE_SECONDS = 20.0
START_DEFAULTS: dict[str, Any] = {"maintenance": False, "scheduler": False, "poll_interval": 0.5}


class SyncHarness:
    def __init__(self, pq: PortQueue) -> None:
        self.pq = pq
        self._gates: list[threading.Event] = []

    def gate(self) -> threading.Event:
        event = threading.Event()
        self._gates.append(event)
        return event

    def start(self, **options: Any) -> PortQueue:
        self.pq.start(**{**START_DEFAULTS, **options})
        return self.pq

    def close(self, check_threads: bool = True) -> None:
        for event in self._gates:
            event.set()
        self.pq.stop(abort=True)
        if check_threads:
            wait_for_worker_threads_to_end()


class AsyncHarness:
    def __init__(self, apq: AsyncPortQueue) -> None:
        self.apq = apq
        self._gates: list[asyncio.Event] = []

    def gate(self) -> asyncio.Event:
        event = asyncio.Event()
        self._gates.append(event)
        return event

    async def start(self, **options: Any) -> AsyncPortQueue:
        await self.apq.start(**{**START_DEFAULTS, **options})
        return self.apq

    async def close(self) -> None:
        for event in self._gates:
            event.set()
        try:
            await self.apq.stop(abort=True)
        finally:
            await self.apq.aclose()
        await wait_until_async(lambda: not worker_threads(), what="worker threads to end")


# Threads a worker starts: its loop (PortQueue), its handler thread pool,
# its event callback thread, and the pool of connections for job.transaction().
WORKER_THREAD_PREFIXES = ("portqueue-worker", "portqueue-handler", "portqueue-callbacks",
                          "portqueue:handler")


def worker_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(WORKER_THREAD_PREFIXES)]


def wait_for_worker_threads_to_end() -> None:
    """No test leaves a worker's thread behind (handlers return once their
    gates open; a stopped worker's pools end their threads)."""
    wait_until(lambda: not worker_threads(), what="worker threads to end")


async def wait_gate(gate: asyncio.Event) -> None:
    """An async handler's bounded wait on a gate."""
    await asyncio.wait_for(gate.wait(), GATE_SECONDS)


def status(db: Db, schema: str, job_id: str) -> str:
    row = fetch_one(db, schema, "job", "id = %s", [job_id])
    assert row is not None, f"job {job_id} is not in the table"
    return str(row["status"])


def finished_row(db: Db, schema: str, job_id: str) -> dict[str, Any] | None:
    """The job's row once it has finished (any final status), else None."""
    row = fetch_one(db, schema, "job", "id = %s", [job_id])
    assert row is not None, f"job {job_id} is not in the table"
    return row if row["finished_at"] is not None else None


def row_where(db: Db, schema: str, job_id: str, condition: str) -> dict[str, Any] | None:
    """The job's row if it satisfies a literal, test-written SQL ``condition``."""
    return fetch_one(db, schema, "job", f"id = %s AND ({condition})", [job_id])


def active(db: Db, schema: str, job_id: str) -> Callable[[], Any]:
    """A condition for ``wait_until``: the job's row while it is ``active``."""
    return lambda: row_where(db, schema, job_id, "status = 'active'")


def handler_transactions_in_progress(db: Db) -> int:
    """Handler connections of this database inside a transaction: idle in it,
    or running a statement in it (a fenced completion being written, before
    the rollback or commit that ends it)."""
    row = db.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND application_name = 'portqueue:handler' AND xact_start IS NOT NULL"
    ).fetchone()
    assert row is not None
    return int(row[0])


def handler_transactions_open(db: Db) -> int:
    """Handler connections of this database holding a transaction open."""
    row = db.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND application_name = 'portqueue:handler' AND state LIKE 'idle in transaction%%'"
    ).fetchone()
    assert row is not None
    return int(row[0])
