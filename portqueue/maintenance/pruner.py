"""The pruner: deletes finished jobs that retention no longer keeps.

Runs in every worker; a transaction-scoped advisory lock lets one act at a
time. Bounded batches keyed on id, a statement timeout, jittered interval.

Retention of a finished job (completed, failed, cancelled, expired):
- by age: the job's ttl for its outcome (``retention_completed_ttl_seconds``
  for completed jobs, ``retention_failed_ttl_seconds`` for the others), else
  its ``retention_ttl_seconds``, else its queue's two likewise, else the
  client's ``default_retention`` per outcome, else its
  ``default_retention_seconds`` (7 days); a ttl of 0 deletes the job on the
  first pass after it finished, ``FOREVER`` never;
- by count: a queue's ``retention_keep_completed`` / ``retention_keep_failed``
  (else the client's ``default_retention`` caps) keep only its newest N
  completed / failed jobs (by ``finished_at``).
Whichever rule comes first deletes the job, except that two kinds of job are
kept past it (docs/retention.md): the source of a dead-letter copy, while
the copy exists, and a job someone waits for (``wait_for_job``,
``add_job_and_wait``), for ``waited_grace_seconds`` after it finished. A
pass lists the rules and
ranges that have work (``prune_work``), then deletes each range's jobs in
batches, each batch one short transaction starting where the last ended, so
a long prune never holds locks that claims or adds wait on, and never reads
its own deleted rows again.
"""

from __future__ import annotations

from typing import Any

import psycopg

from portqueue import maintenance_operations as ops
from portqueue.driver import execute_async
from portqueue.maintenance.service import Service


class Pruner(Service):
    """Every 30 s by default (jittered ±20 %), 1000 rows per batch."""

    name = "pruner"
    interval_seconds = 30.0
    default_batch_size = 1000
    done = "pruned %d finished job(s)"
    # A waiter reads its job moments after the finish notification; this is
    # the slack before a job with retention 0 may go from under a stalled one.
    waited_grace_seconds = 60.0
    batches = 0  # in the last pass, for logs and tests

    async def run_once(self) -> int:
        """One pass: delete jobs past retention in batches, if no other worker is."""
        total = 0
        self.batches = 0
        async with self.transaction() as conn:
            if not await self.begin(conn):
                return total
            work = ops.prune_work_items(await execute_async(conn, ops.prune_work(
                self.q, default_retention_seconds=self.settings.default_retention_seconds,
                default_retention=self.settings.default_retention)))
        for item in work:
            # Each batch starts after the last row the previous one looked at.
            after: ops.PruneBatch | None = None
            while True:
                async with self.transaction() as conn:
                    if not await self.begin(conn):
                        return total
                    batch = ops.pruned(await execute_async(conn, ops.prune_batch(
                        self.q, item, limit=self.batch_size,
                        waited_grace_seconds=self.waited_grace_seconds, after=after)))
                total += batch.deleted
                self.batches += 1
                if batch.candidates < self.batch_size:
                    break
                after = batch
        return total

    async def begin(self, conn: psycopg.AsyncConnection[Any]) -> bool:
        if not await super().begin(conn):
            return False
        await execute_async(conn, ops.disable_jit(self.q))
        return True
