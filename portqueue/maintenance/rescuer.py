"""The lease rescuer: jobs whose lease lapsed go back to pending (or failed).

A worker that was killed, lost its host or stalled stops heartbeating; the
rescuer returns its jobs with one guarded UPDATE per batch (see
``rescue_lapsed`` in sql/maintenance.sql), so each lapsed attempt is rescued
exactly once however many workers run it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from psycopg_pool import AsyncConnectionPool

from portqueue import maintenance_operations as ops
from portqueue.maintenance.service import BatchService, lock_key
from portqueue.metrics import hooks
from portqueue.queries import Query
from portqueue.settings import Settings

__all__ = ["Rescuer", "lock_key"]


class Rescuer(BatchService):
    """Every 2 s by default, 500 jobs per batch."""

    name = "rescuer"
    interval_seconds = 2.0
    default_batch_size = 500
    done = "rescued %d job(s) whose lease lapsed"

    def __init__(self, settings: Settings, pool: AsyncConnectionPool[Any],
                 interval: float | None = None, batch_size: int | None = None, *,
                 on_rescued: Callable[[list[str]], None] | None = None) -> None:
        super().__init__(settings, pool, interval, batch_size)
        # The worker's job_rescued event; None outside a worker (portqueue prune).
        self._on_rescued = on_rescued

    def batch_query(self) -> Query:
        return ops.rescue_lapsed(self.q, limit=self.batch_size)

    def handled(self, rows: list[dict[str, Any]]) -> None:
        job_ids, queues = ops.rescued(rows)
        hooks.jobs_rescued(queues)
        if self._on_rescued is not None and job_ids:
            self._on_rescued(job_ids)
