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

from psycopg_pool import ConnectionPool

from portqueue import PortQueue
from portqueue.worker.job import Job

QUEUE = "faults"

pq = PortQueue(
    os.environ["PORTQUEUE_DSN"],
    schema=os.environ.get("PORTQUEUE_SCHEMA", "portqueue"),
    pool_min_size=0,
    pool_max_size=int(os.environ.get("FAULT_POOL_MAX_SIZE", "4")),
)

_ledger = ConnectionPool(
    os.environ["PORTQUEUE_DSN"], min_size=0, max_size=2, open=True, name="faults:ledger",
    kwargs={"autocommit": True, "application_name": "faults:ledger"})


@pq.handler(QUEUE, concurrency=int(os.environ.get("FAULT_CONCURRENCY", "4")),
            lease_seconds=int(os.environ.get("FAULT_LEASE_SECONDS", "2")))
def handle(job: Job) -> dict[str, Any]:
    with _ledger.connection() as conn:
        conn.execute("INSERT INTO faults.ledger (job_id, attempt, pid, event) "
                     "VALUES (%s, %s, %s, 'claimed')", (job.id, job.attempt, os.getpid()))
    data = job.data if isinstance(job.data, dict) else {}
    if data.get("sleep"):
        time.sleep(float(data["sleep"]))
    return {"pid": os.getpid(), "attempt": job.attempt}
