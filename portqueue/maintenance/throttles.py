"""The throttle pruner: forgets throttle windows that have ended.

A throttle key's row (``throttle_window``) is replaced by the key's next add
once its window has ended, so a key used again never piles up rows; a key
never used again would keep its row forever. Runs in every worker; a
transaction-scoped advisory lock lets one act at a time. Bounded batches,
oldest window first, a statement timeout, jittered interval.
"""

from __future__ import annotations

from portqueue import maintenance_operations as ops
from portqueue.maintenance.service import BatchService
from portqueue.queries import Query


class ThrottlePruner(BatchService):
    """Every 60 s by default (jittered ±20 %), 1000 windows per batch."""

    name = "throttles"
    interval_seconds = 60.0
    default_batch_size = 1000
    done = "forgot %d ended throttle window(s)"

    def batch_query(self) -> Query:
        return ops.prune_throttle_windows(self.q, limit=self.batch_size)
