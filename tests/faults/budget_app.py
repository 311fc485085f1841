"""The app of the connection-budget tests: ``python -m portqueue.cli worker
tests.faults.budget_app:pq``, one no-op handler on ``faults``.

``BUDGET_APPLICATION_NAME`` prefixes every connection's application_name, so
a test counts one process's connections in pg_stat_activity; the client's
own pool stays closed (the worker never adds or reads through it).
"""

from __future__ import annotations

import os
from typing import Any

from portqueue import PortQueue

pq = PortQueue(
    os.environ["PORTQUEUE_DSN"],
    schema=os.environ.get("PORTQUEUE_SCHEMA", "portqueue"),
    application_name=os.environ.get("BUDGET_APPLICATION_NAME", "portqueue"),
    pool_min_size=0,
    pool_max_size=1,
)


@pq.handler("faults", concurrency=int(os.environ.get("FAULT_CONCURRENCY", "4")),
            lease_seconds=int(os.environ.get("FAULT_LEASE_SECONDS", "5")))
def handler(job: Any) -> dict[str, int]:
    return {"pid": os.getpid()}
