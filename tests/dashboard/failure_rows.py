"""Failed jobs in bulk, for paging and bulk actions: added through the API,
then failed with a test-written UPDATE (a real worker fails the few whose
error text a test reads back, see conftest.fail_job)."""

from __future__ import annotations

from typing import Any

import psycopg

from portqueue import PortQueue
from tests.support.rows import update_job


def add_failed(pq: PortQueue, db: psycopg.Connection[Any], schema: str, *, queue: str,
               count: int, message: str = "boom", ago_seconds: int = 0) -> list[str]:
    """``count`` failed jobs of ``queue``, the later ones failed later, oldest first."""
    added = pq.add_jobs(queue=queue, jobs=[{"data": {"n": n}} for n in range(count)])
    ids = [str(result.job_id) for result in added]
    for n, job_id in enumerate(ids):
        update_job(db, schema, job_id,
                   "status = 'failed', attempt = 1, started_at = now(), "
                   f"finished_at = now() - interval '{ago_seconds} s' "
                   f"+ interval '{n} ms', error = '{message} {n}'")
    return ids
