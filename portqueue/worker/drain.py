"""drain(): run every ready job of some queues in the caller, until none is ready.

For tests of users' own handlers and producers. It is a worker without its
claim loop: the same fetcher claims (leases, fencing tokens, pause, instance
keys), the same runners run the handlers (timeouts, signals,
``job.transaction()``), the same completer writes the outcomes (retries,
dead letters, snoozes) and the same heartbeat keeps the leases. Only the
pace differs: one claim of every free slot, then a wait until those jobs
have run and their outcomes are written, then the next claim, so a job a
handler adds, or a retry due now, is claimed in the next round. The first
claim that finds nothing ends it.
"""

from __future__ import annotations

import asyncio

from portqueue import worker_operations as ops
from portqueue.errors import PortQueueError
from portqueue.types import DrainResult
from portqueue.worker.runtime import Worker


async def drain(worker: Worker, *, with_scheduled: bool, timeout_seconds: float) -> DrainResult:
    """Start ``worker`` (built ``for_drain``), run its queues dry, stop it.

    ``with_scheduled``: before each claim, delayed jobs and pending retries of
    the queues are made ready now. Raises the builtin ``TimeoutError`` when the
    queues are not dry within ``timeout_seconds`` (a handler that hangs, or
    one that keeps snoozing with ``with_scheduled``): the worker is then
    stopped as by ``stop(abort=True)``, its running jobs released to pending."""
    await worker.start()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_seconds
    try:
        await _rounds(worker, with_scheduled, deadline)
    except BaseException:
        await worker.stop(abort=True)
        raise
    await worker.stop()
    if worker.fatal is not None:
        raise PortQueueError(f"drain failed: {worker.fatal!r}") from worker.fatal
    written = worker.completer.written
    return DrainResult(completed=written["completed"], failed=written["failed"],
                       retried=written["retried"], cancelled=written["cancelled"],
                       snoozed=written["snoozed"])


async def _rounds(worker: Worker, with_scheduled: bool, deadline: float) -> None:
    queues = list(worker.queues)
    while worker.fatal is None:
        if with_scheduled:
            await worker.connections.execute(ops.start_delayed_now(worker.q, queues))
        # Every slot is free here: the round before has run and been written.
        asked = {name: worker.demand.free(name) for name in queues}
        rows = await worker.fetcher.claim_now(asked)
        if not rows:
            return
        await _settled(worker, deadline)


async def _settled(worker: Worker, deadline: float) -> None:
    """Until nothing runs and every outcome is written; TimeoutError past ``deadline``."""
    loop = asyncio.get_running_loop()
    while not (worker.jobs.idle.is_set() and worker.completer.idle.is_set()):
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise TimeoutError(f"drain: the queues were not dry within timeout_seconds "
                               f"({len(worker.jobs)} job(s) still running)")
        waiting = worker.jobs.idle if not worker.jobs.idle.is_set() else worker.completer.idle
        try:
            await asyncio.wait_for(waiting.wait(), remaining)
        except TimeoutError:
            continue  # the deadline check above raises with the count
