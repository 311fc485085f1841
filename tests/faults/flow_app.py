"""The fan-in test's worker app: ``portqueue worker tests.faults.flow_app:pq``.

``tests.faults.app``'s ``faults`` queue runs the flow's parents (ledger,
effect through ``job.transaction()``, ``{"pid", "attempt"}`` returned). The
``faults-callback`` queue runs the flow's last job, which depends on every
parent: it records its claim in the ledger, then, inside
``job.transaction()`` (so its effect and its completion commit together),
counts its parents that are not completed and writes its effect. It returns
what it saw, for the test to check.
"""

from __future__ import annotations

import os
from typing import Any

from psycopg import sql

from portqueue.worker.job import Job
from tests.faults.app import _record, pq

CALLBACK_QUEUE = "faults-callback"
SCHEMA = os.environ.get("PORTQUEUE_SCHEMA", "portqueue")


@pq.handler(CALLBACK_QUEUE, lease_seconds=int(os.environ.get("FAULT_LEASE_SECONDS", "2")))
def callback(job: Job) -> dict[str, Any]:
    _record(job, "claimed")
    with job.transaction() as conn:
        row = conn.execute(sql.SQL(
            "SELECT count(*) FROM {job} AS c JOIN {job} AS p ON p.id = ANY(c.depends_on) "
            "WHERE c.id = %s AND p.status <> 'completed'").format(
                job=sql.Identifier(SCHEMA, "job")), [job.id]).fetchone()
        conn.execute("INSERT INTO faults.effect (job_id, attempt, pid) VALUES (%s, %s, %s)",
                     (job.id, job.attempt, os.getpid()))
    outputs = job.parent_outputs
    _record(job, "returning")
    return {"pid": os.getpid(), "attempt": job.attempt,
            "unfinished_parents": row[0] if row else None,
            "keys": sorted(outputs),
            "outputs_from_attempts": all(isinstance(v, dict) and "attempt" in v
                                         for v in outputs.values())}
