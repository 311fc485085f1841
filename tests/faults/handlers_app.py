"""A second fault app, on ``AsyncPortQueue``: ``portqueue worker tests.faults.handlers_app:apq``.

It runs the way an asyncio application's worker runs (``asyncio.run(apq.run())``
in the CLI), and holds the handlers that misbehave: the ones of scenario 8
(an async handler blocking the event loop, one swallowing its cancellation,
handlers raising ``BaseException`` subclasses) and the pool-hungry one of
scenario 9. Settings come from the harness's environment, as for ``app.py``,
plus ``FAULT_POOL_MAX_SIZE`` (the client's pool, which also sizes the
handlers' ``job.transaction()`` pool).

Two queues, one async handler and one sync handler (run in a thread), with
the same ledger and effect contract as ``app.py``: a ``claimed`` row first,
the side effect through ``job.transaction()``, a ``returning`` row, output
``{"pid", "attempt"}``. Faults, on the runs listed in ``fault_runs``:

- ``{"fault": "raise", "exception": NAME}`` raises that ``BaseException``;
- ``{"fault": "block_loop", "seconds": S}`` (async) ``time.sleep``s on the
  event loop itself: nothing else of the worker runs, heartbeats included;
- ``{"fault": "swallow_cancel", "seconds": S}`` (async) opens
  ``job.transaction()``, writes its effect, then keeps running for S seconds,
  catching every ``CancelledError`` thrown at it (recorded as ``swallowed``);
- ``{"fault": "exit_in_tx"}`` (async) writes its effect in ``job.transaction()``,
  then ``os._exit(1)``s with the transaction open;
- ``{"sleep_in_tx": S}`` holds its ``job.transaction()`` connection S seconds;
- ``{"read_job": true}`` first reads its own row through the client's pool.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from psycopg_pool import AsyncConnectionPool, ConnectionPool

from portqueue import AsyncPortQueue
from portqueue.worker.job import AsyncJob, Job

QUEUE = "faults-async"
SYNC_QUEUE = "faults-sync"
CONCURRENCY = int(os.environ.get("FAULT_CONCURRENCY", "4"))
LEASE_SECONDS = int(os.environ.get("FAULT_LEASE_SECONDS", "2"))
DSN = os.environ["PORTQUEUE_DSN"]

apq = AsyncPortQueue(
    DSN,
    schema=os.environ.get("PORTQUEUE_SCHEMA", "portqueue"),
    pool_min_size=0,
    pool_max_size=int(os.environ.get("FAULT_POOL_MAX_SIZE", "4")),
)


class CustomStop(BaseException):
    """An application's own BaseException, outside the Exception tree."""


RAISABLE: dict[str, type[BaseException]] = {
    "KeyboardInterrupt": KeyboardInterrupt,
    "SystemExit": SystemExit,
    "GeneratorExit": GeneratorExit,
    "CancelledError": asyncio.CancelledError,
    "CustomStop": CustomStop,
}

INSERT_LEDGER = "INSERT INTO faults.ledger (job_id, attempt, pid, event) VALUES (%s, %s, %s, %s)"
INSERT_EFFECT = "INSERT INTO faults.effect (job_id, attempt, pid) VALUES (%s, %s, %s)"
RUN_NUMBER = "SELECT count(*) FROM faults.ledger WHERE job_id = %s AND event = 'claimed'"
LEDGER_KWARGS = {"autocommit": True, "application_name": "faults:ledger"}

# The ledger's own connections, never the job's (see app.py). The async pool
# is opened on the worker's loop, at its first use.
_async_ledger: AsyncConnectionPool | None = None
_sync_ledger = ConnectionPool(DSN, min_size=0, max_size=2, open=True, name="faults:ledger",
                              kwargs=LEDGER_KWARGS)


async def _ledger() -> AsyncConnectionPool:
    global _async_ledger
    if _async_ledger is None:
        _async_ledger = AsyncConnectionPool(DSN, min_size=0, max_size=2, open=False,
                                            name="faults:ledger", kwargs=LEDGER_KWARGS)
        await _async_ledger.open()
    return _async_ledger


async def _record(job: AsyncJob, event: str) -> int:
    """Writes a ledger row; returns the job's run number (its ``claimed`` rows)."""
    async with (await _ledger()).connection() as conn:
        await conn.execute(INSERT_LEDGER, (job.id, job.attempt, os.getpid(), event))
        row = await (await conn.execute(RUN_NUMBER, (job.id,))).fetchone()
    return int(row[0]) if row else 0


def _faulted(data: dict[str, Any], run: int) -> str | None:
    fault = data.get("fault")
    return fault if fault and ("fault_runs" not in data or run in data["fault_runs"]) else None


def _raise(data: dict[str, Any]) -> None:
    raise RAISABLE[data["exception"]](f"{data['exception']} raised by the handler")


async def _swallow_cancel(job: AsyncJob, seconds: float) -> dict[str, Any]:
    async with job.transaction() as conn:
        await conn.execute(INSERT_EFFECT, (job.id, job.attempt, os.getpid()))
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        try:
            await asyncio.sleep(left)
        except asyncio.CancelledError:
            # The defect on purpose: a cancelled handler that carries on.
            await _record(job, "swallowed")
    await _record(job, "returning")
    return {"pid": os.getpid(), "attempt": job.attempt}


@apq.handler(QUEUE, concurrency=CONCURRENCY, lease_seconds=LEASE_SECONDS)
async def handle(job: AsyncJob) -> dict[str, Any]:
    run = await _record(job, "claimed")
    data = job.data if isinstance(job.data, dict) else {}
    fault = _faulted(data, run)
    if fault == "raise":
        _raise(data)
    elif fault == "block_loop":
        time.sleep(float(data["seconds"]))  # blocks the whole event loop: the fault
    elif fault == "swallow_cancel":
        return await _swallow_cancel(job, float(data["seconds"]))
    elif fault == "exit_in_tx":
        async with job.transaction() as conn:
            await conn.execute(INSERT_EFFECT, (job.id, job.attempt, os.getpid()))
            os._exit(1)
    elif fault is not None:
        raise ValueError(f"unknown fault {fault!r}")
    if data.get("read_job"):
        assert await apq.get_job(job_id=job.id) is not None
    async with job.transaction() as conn:
        await conn.execute(INSERT_EFFECT, (job.id, job.attempt, os.getpid()))
        if data.get("sleep_in_tx"):
            await asyncio.sleep(float(data["sleep_in_tx"]))
    await _record(job, "returning")
    return {"pid": os.getpid(), "attempt": job.attempt}


@apq.handler(SYNC_QUEUE, concurrency=CONCURRENCY, lease_seconds=LEASE_SECONDS)
def handle_sync(job: Job) -> dict[str, Any]:
    with _sync_ledger.connection() as conn:
        conn.execute(INSERT_LEDGER, (job.id, job.attempt, os.getpid(), "claimed"))
        row = conn.execute(RUN_NUMBER, (job.id,)).fetchone()
    data = job.data if isinstance(job.data, dict) else {}
    fault = _faulted(data, int(row[0]) if row else 0)
    if fault == "raise":
        _raise(data)
    elif fault is not None:
        raise ValueError(f"unknown fault {fault!r}")
    with job.transaction() as conn:
        conn.execute(INSERT_EFFECT, (job.id, job.attempt, os.getpid()))
    with _sync_ledger.connection() as conn:
        conn.execute(INSERT_LEDGER, (job.id, job.attempt, os.getpid(), "returning"))
    return {"pid": os.getpid(), "attempt": job.attempt}
