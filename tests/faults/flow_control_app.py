"""The app of the flow-control tests' worker processes:
``python -m portqueue.cli worker tests.faults.flow_control_app:pq``.

Its queue ``flow`` declares the limits the environment names (``FLOW_GLOBAL``,
``FLOW_PARTITION``, ``FLOW_RATE`` as ``limit/period_seconds[/per_partition]``),
with ``FAULT_CONCURRENCY`` slots and ``FAULT_LEASE_SECONDS`` leases. Its handler
works for ``data["sleep"]`` seconds, or ``data["sleep_first"]`` on a job's first
attempt (so a job rescued from a killed worker runs quickly the second time).
"""

from __future__ import annotations

import os
import time
from typing import Any

from portqueue import PortQueue, RateLimit
from portqueue.worker.job import Job

QUEUE = "flow"

pq = PortQueue(
    os.environ["PORTQUEUE_DSN"],
    schema=os.environ.get("PORTQUEUE_SCHEMA", "portqueue"),
    pool_min_size=0,
    pool_max_size=3,
)


def _limits() -> dict[str, Any]:
    limits: dict[str, Any] = {}
    if os.environ.get("FLOW_GLOBAL"):
        limits["global_concurrency"] = int(os.environ["FLOW_GLOBAL"])
    if os.environ.get("FLOW_PARTITION"):
        limits["partition_concurrency"] = int(os.environ["FLOW_PARTITION"])
    if os.environ.get("FLOW_RATE"):
        limit, period, *per_partition = os.environ["FLOW_RATE"].split("/")
        limits["rate_limit"] = RateLimit(int(limit), int(period), bool(per_partition))
    return limits


@pq.handler(QUEUE, concurrency=int(os.environ.get("FAULT_CONCURRENCY", "4")),
            lease_seconds=int(os.environ.get("FAULT_LEASE_SECONDS", "30")),
            retry={"max_attempts": 3}, **_limits())
def run(job: Job) -> None:
    data = job.data if isinstance(job.data, dict) else {}
    seconds = data.get("sleep_first", 0) if job.attempt == 1 else 0
    time.sleep(seconds or data.get("sleep", 0))
