"""The reaper: forgets worker instances that stopped heartbeating.

Runs in every worker; a transaction-scoped advisory lock lets one act at a
time. Bounded batches keyed on id, a statement timeout, jittered interval.
A worker is dead when not seen for ten of its heartbeats and at least
``MIN_SILENCE_SECONDS``; a worker that stops cleanly removes its own row.
Its jobs are not touched here: the rescuer recovers them when their leases lapse.
"""

from __future__ import annotations

from typing import Any

from psycopg_pool import AsyncConnectionPool

from portqueue import maintenance_operations as ops
from portqueue.maintenance.service import BatchService
from portqueue.queries import Query
from portqueue.settings import Settings

MIN_SILENCE_SECONDS = 300
# The lease a worker declares when its queue row names none (the worker's own default).
DEFAULT_LEASE_SECONDS = 60


class Reaper(BatchService):
    """Every 60 s by default (jittered ±20 %), 500 rows per batch;
    ``min_silence_seconds`` (default 300): never reap a worker seen more recently."""

    name = "reaper"
    interval_seconds = 60.0
    default_batch_size = 500
    done = "forgot %d worker instance(s) no longer heartbeating"

    def __init__(self, settings: Settings, pool: AsyncConnectionPool[Any],
                 interval: float | None = None, batch_size: int | None = None,
                 min_silence_seconds: float = MIN_SILENCE_SECONDS) -> None:
        super().__init__(settings, pool, interval, batch_size)
        self.min_silence_seconds = min_silence_seconds

    def batch_query(self) -> Query:
        return ops.reap_workers(self.q, limit=self.batch_size,
                                min_silence_seconds=self.min_silence_seconds,
                                default_lease_seconds=DEFAULT_LEASE_SECONDS)
