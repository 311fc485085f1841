"""The heartbeat: one statement extends every lease this worker holds and
carries progress, attrs and cancel requests; a second refreshes the worker's
own row. Both run on the claim session, between claims (``session``): short
statements, never behind a completion batch or a maintenance pass, and no
connection of their own (the budget in connections.py).

Leases held are those of running jobs and of finished jobs whose outcome
the completer has not written yet (``leases()``), so a job whose outcome is
stuck is not rescued and run again meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import psycopg

from portqueue import worker_operations as ops
from portqueue.driver import execute_async
from portqueue.queries import Queries, Query
from portqueue.worker.connections import Connections
from portqueue.worker.events import EventDispatch
from portqueue.worker.state import Running
from portqueue.worker.stopping import Stopping, Wake

log = logging.getLogger("portqueue.worker")

# Progress and attrs reported within this long of each other go in one write.
BURST_SECONDS = 0.05


class Heartbeat:
    def __init__(self, connections: Connections, queries: Queries, events: EventDispatch,
                 stopping: Stopping, registration: Query, interval: float, worker_id: str,
                 session: Callable[[], contextlib.AbstractAsyncContextManager[
                     psycopg.AsyncConnection[Any]]],
                 leases: Callable[[], list[Running]]) -> None:
        self._connections = connections
        self.q = queries
        self._events = events
        self._stopping = stopping
        self._registration = registration
        self._interval = interval
        self._worker_id = worker_id
        self._leases = leases
        self._session = session
        self._now = Wake()
        self._loop = asyncio.get_running_loop()

    def soon(self) -> None:
        """Thread-safe: touch soon (a handler reported progress or attrs)."""
        self._loop.call_soon_threadsafe(self._now.set)

    async def run(self) -> None:
        failures = 0
        while not self._stopping():
            await self._stopping.wait_for(self._now, self._interval)
            if self._now.is_set():
                # Woken by progress or attrs: gather a burst into one write.
                await self._stopping.sleep(BURST_SECONDS)
            self._now.clear()
            if self._stopping():
                return
            try:
                # The session closes itself when the touch fails on it.
                async with self._session() as conn:
                    await self._touch(conn)
                failures = 0
            except psycopg.Error as exc:
                failures += 1
                log.warning("worker %s: heartbeat failed (%s)", self._worker_id, exc)
                await self._stopping.sleep(min(0.1 * 2 ** failures, self._interval))

    async def _touch(self, conn: psycopg.AsyncConnection[Any]) -> None:
        touched = self._leases()
        reports = {r.claimed.id: r.report.take() for r in touched}
        touch = ops.touch_jobs(self.q, [
            ops.Touch(r.lease, r.spec.lease_seconds, *reports[r.claimed.id]) for r in touched])

        async def write() -> list[dict[str, Any]]:
            # An idle worker only refreshes its own row: one statement, not two.
            rows = await execute_async(conn, touch) if touched else []
            await execute_async(conn, self._registration)
            return rows

        try:
            rows = await self._connections.within(conn, write())
        except BaseException:
            for running in touched:
                running.report.put_back(*reports[running.claimed.id])
            raise
        alive = ops.touched(rows)
        for running in touched:
            running.report.confirm()
            job_id = running.claimed.id
            if job_id not in alive:
                if not running.settled:
                    # Fenced out: another worker may own this job now.
                    running.settled = True
                    running.state.set("lease_lost")
                    log.warning("job %s on %r: lease lost", job_id, running.claimed.queue)
            elif alive[job_id]:
                running.state.set("cancelled")
        progressed = [job_id for job_id, (progress, attrs) in reports.items()
                      if job_id in alive and (progress is not None or attrs)]
        if progressed:
            self._events.emit_later("job_progress", progressed)
