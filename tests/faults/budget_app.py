"""The app of the connection-budget tests: ``python -m portqueue.cli worker
tests.faults.budget_app:pq`` (or ``:apq``, the async client, whose worker runs
on the CLI's loop), one no-op handler on ``faults``.

``BUDGET_APPLICATION_NAME`` prefixes every connection's application_name, so
a test counts one process's connections in pg_stat_activity; the client's
own pool stays closed (the worker never adds or reads through it).
"""

from __future__ import annotations

import os
from typing import Any

from portqueue import AsyncPortQueue, PortQueue

SETTINGS: dict[str, Any] = {
    "schema": os.environ.get("PORTQUEUE_SCHEMA", "portqueue"),
    "application_name": os.environ.get("BUDGET_APPLICATION_NAME", "portqueue"),
    "pool_min_size": 0, "pool_max_size": 1,
}
CONCURRENCY = int(os.environ.get("FAULT_CONCURRENCY", "4"))
LEASE_SECONDS = int(os.environ.get("FAULT_LEASE_SECONDS", "5"))

pq = PortQueue(os.environ["PORTQUEUE_DSN"], **SETTINGS)
apq = AsyncPortQueue(os.environ["PORTQUEUE_DSN"], **SETTINGS)


@pq.handler("faults", concurrency=CONCURRENCY, lease_seconds=LEASE_SECONDS)
def handler(job: Any) -> dict[str, int]:
    return {"pid": os.getpid()}


@apq.handler("faults", concurrency=CONCURRENCY, lease_seconds=LEASE_SECONDS)
async def async_handler(job: Any) -> dict[str, int]:
    return {"pid": os.getpid()}
