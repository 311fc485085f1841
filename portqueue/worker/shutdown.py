"""stop()'s budget and the jobs still running when it comes.

``StopBudget``: ``stop()`` returns within ``grace_seconds`` plus
``STOP_MARGIN_SECONDS`` whatever the database does. Each of its steps that
waits on the database gets what is left of that budget (at least
``MIN_STEP_SECONDS``); past it, every connection in use is closed and the
step cancelled, leaving what a crash would leave (leases lapse and are
rescued).

``Release``: the running jobs' drain (wait for them, or for an abort), then
what still runs is settled (a late outcome is dropped), signalled and
released to pending in one statement.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable

from portqueue import worker_operations as ops
from portqueue.queries import Queries
from portqueue.worker.connections import Connections
from portqueue.worker.state import Running, RunningJobs

log = logging.getLogger("portqueue.worker")

STOP_MARGIN_SECONDS = 2.0
MIN_STEP_SECONDS = 0.2
# How long the loops get to end by themselves once stop is requested, before
# they are cancelled.
LOOP_END_SECONDS = 1.0


class StopBudget:
    def __init__(self, connections: Connections, worker_id: str, grace_seconds: float) -> None:
        self._connections = connections
        self._worker_id = worker_id
        self._loop = asyncio.get_running_loop()
        self._stop_by = self._loop.time() + grace_seconds + STOP_MARGIN_SECONDS

    def left(self) -> float:
        return max(self._stop_by - self._loop.time(), MIN_STEP_SECONDS)

    def grace_left(self) -> float:
        """What is left of the grace period itself (the running jobs' drain)."""
        return max(self._stop_by - STOP_MARGIN_SECONDS - self._loop.time(), 0)

    async def within(self, work: Awaitable[object], what: str) -> None:
        """``work``, within what is left of the budget; past it, every
        connection in use is closed and ``work`` cancelled."""
        task = asyncio.ensure_future(work)
        done, _ = await asyncio.wait({task}, timeout=self.left())
        if not done:
            log.warning("worker %s: stopping: %s did not finish in time; closing the "
                        "connections in use", self._worker_id, what)
            await self._connections.interrupt()
            task.cancel()
            await asyncio.wait({task}, timeout=MIN_STEP_SECONDS)
        elif not task.cancelled() and task.exception() is not None:
            log.warning("worker %s: stopping: %s failed: %s", self._worker_id, what,
                        task.exception())

    async def end_loops(self, tasks: list[asyncio.Task[None]]) -> None:
        """Every loop saw the stop and ends by itself; what has not within
        LOOP_END_SECONDS (a statement still waiting) has its connections
        closed and is cancelled, and is left behind if even that hangs."""
        if not tasks:
            return
        await asyncio.wait(tasks, timeout=min(LOOP_END_SECONDS, self.left()))
        if all(task.done() for task in tasks):
            return
        await self._connections.interrupt()
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks, timeout=MIN_STEP_SECONDS)
        stuck = [task.get_name() for task in tasks if not task.done()]
        if stuck:
            log.warning("worker %s: %s did not end after cancellation", self._worker_id, stuck)


class Release:
    def __init__(self, connections: Connections, queries: Queries, jobs: RunningJobs,
                 worker_id: str) -> None:
        self._connections = connections
        self.q = queries
        self._jobs = jobs
        self._worker_id = worker_id
        self._released: list[Running] = []  # settled, to release

    async def drain(self, abort: asyncio.Event, seconds: float) -> None:
        """Until every running job has finished, ``abort`` is set, or ``seconds``."""
        if len(self._jobs) and not abort.is_set():
            idle = asyncio.ensure_future(self._jobs.idle.wait())
            aborted = asyncio.ensure_future(abort.wait())
            await asyncio.wait({idle, aborted}, timeout=seconds,
                               return_when=asyncio.FIRST_COMPLETED)
            idle.cancel()
            aborted.cancel()

    def settle(self) -> None:
        """Running jobs are settled (a late outcome is dropped) and signalled.
        Called with no await before it in its step: a handler that returns
        meanwhile writes no outcome of its own."""
        for running in self._jobs.unsettled():
            running.settled = True
            running.state.set("shutdown")
            self._released.append(running)

    async def release(self) -> None:
        released, self._released = self._released, []
        if released:
            rows = await self._connections.execute(
                ops.release_jobs(self.q, [r.lease for r in released]))
            log.info("worker %s released %d running job(s) to pending", self._worker_id,
                     len(rows[-1]))
