"""A worker app whose jobs are fast, except those marked ``block`` in a process
started with ``HOLD_BLOCK=1`` (they never return): such a worker fills its
slots with them and holds what it claimed ahead (portqueue/worker/hold.py)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from portqueue.worker.job import AsyncJob
from tests.support.fault_apps import fault_client

QUEUE = "hold"

pq = fault_client()


@pq.handler(QUEUE, concurrency=2, lease_seconds=2)
async def handle(job: AsyncJob) -> dict[str, Any]:
    if isinstance(job.data, dict) and job.data.get("block") and os.environ.get("HOLD_BLOCK"):
        await asyncio.sleep(3600)
    return {"pid": os.getpid()}
