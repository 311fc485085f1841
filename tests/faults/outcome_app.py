"""A fault-test app whose handler returns its outcome for the worker to write
(no ``job.transaction()``): ``portqueue worker tests.faults.outcome_app:pq``.

Same environment as ``app.py``. The handler records a ``claimed`` ledger row
on a connection of its own, sleeps ``data["sleep"]`` seconds if given, and
returns ``{"pid", "attempt"}``: the completer writes every outcome, so a
black-holed outcome connection is on the path of every job.
"""

from __future__ import annotations

import os
import time
from typing import Any

from portqueue.worker.job import Job
from tests.support.fault_apps import fault_client, ledger_pool, record

QUEUE = "faults"

pq = fault_client()
_ledger = ledger_pool()


@pq.handler(QUEUE, concurrency=int(os.environ.get("FAULT_CONCURRENCY", "4")),
            lease_seconds=int(os.environ.get("FAULT_LEASE_SECONDS", "2")))
def handle(job: Job) -> dict[str, Any]:
    record(_ledger, job, "claimed")
    data = job.data if isinstance(job.data, dict) else {}
    if data.get("sleep"):
        time.sleep(float(data["sleep"]))
    return {"pid": os.getpid(), "attempt": job.attempt}
