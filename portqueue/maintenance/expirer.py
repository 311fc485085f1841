"""The expirer: pending jobs past their expire_at end expired.

Runs in every worker; a transaction-scoped advisory lock lets one act at a
time. Bounded batches keyed on id, a statement timeout, jittered interval.
A job that expires sets finished_at, so waiters on it are told, and retention
starts counting from then.
"""

from __future__ import annotations

from portqueue import maintenance_operations as ops
from portqueue.maintenance.service import BatchService
from portqueue.queries import Query


class Expirer(BatchService):
    """Every 5 s by default (jittered ±20 %), 1000 jobs per batch."""

    name = "expirer"
    interval_seconds = 5.0
    default_batch_size = 1000
    done = "expired %d job(s) not started in time"

    def batch_query(self) -> Query:
        return ops.expire_pending(self.q, limit=self.batch_size)
