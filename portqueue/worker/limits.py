"""Flow control in the claim loop: which queues are limited, and claiming them.

A queue with a limit (SPEC §8) is claimed by ``claim_limited``, one queue per
transaction, after its queue row is locked; every other queue by the plain
claim, which passes over limited queues itself, so a stale view here costs
claims, never a limit. The limits are re-read about once a second: a change
(``set_queue_limits``) makes the queue wanted again, so a raised limit is
used at once. A claim the rate held back says when the next start is
allowed, and the queue is claimed again then: a rate-limited queue is not
polled.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg

from portqueue import worker_operations as ops
from portqueue.driver import execute_async
from portqueue.queries import Queries
from portqueue.worker.demand import Demand
from portqueue.worker.state import Claimed

# How often the fetcher re-reads its queues' limits: how soon a worker
# follows set_queue_limits.
REFRESH_SECONDS = 1.0
# A rate-limited queue is claimed again this long after its window allows a
# start, so the start it waited for is inside the window the claim counts.
RATE_WAKE_MARGIN_SECONDS = 0.005


class Limits:
    def __init__(self, queries: Queries, queues: Sequence[str], demand: Demand) -> None:
        self._q = queries
        self._queues = list(queues)
        self._demand = demand
        self._limited: dict[str, tuple[Any, ...]] = {}
        self._wakes: dict[str, asyncio.TimerHandle] = {}
        self.next_refresh = 0.0

    def limited(self, queue: str) -> bool:
        return queue in self._limited

    async def refresh(self, conn: psycopg.AsyncConnection[Any]) -> None:
        loop = asyncio.get_running_loop()
        self.next_refresh = loop.time() + REFRESH_SECONDS
        rows = await execute_async(conn, ops.queue_limits(self._q, self._queues))
        limited = ops.limited_queues(rows)
        for queue in set(limited) | set(self._limited):
            if limited.get(queue) != self._limited.get(queue):
                self._demand.want(queue)
        self._limited = limited

    async def claim(self, conn: psycopg.AsyncConnection[Any], queue: str, slots: int,
                    lease_seconds: int, patterns: Mapping[str, Sequence[str]],
                    worker_id: str) -> list[Claimed]:
        """Claim up to ``slots`` of ``queue`` within its limits, in one transaction."""
        # Pipelined: BEGIN, the lock, the claim and COMMIT go in one round
        # trip. The server still runs them in turn, so the claim's snapshot is
        # taken once the lock is held.
        lock = ops.lock_limited_queue(self._q, queue)
        claim = ops.claim_limited(self._q, queue=queue, slots=slots,
                                  lease_seconds=lease_seconds, worker_id=worker_id, **patterns)
        async with conn.pipeline() as pipeline, conn.transaction():
            await conn.execute(lock.sql, lock.params)
            cursor = conn.cursor(row_factory=Claimed.rows)
            await cursor.execute(claim.sql, claim.params)
            await pipeline.sync()  # the rows, before COMMIT is sent
            rows = await cursor.fetchall()
        claimed = []
        for row in rows:
            if row.status == ops.RATE_LIMITED:
                self._wake_at(queue, float(row.data_json))
            else:
                claimed.append(row)
        return claimed

    def _wake_at(self, queue: str, seconds: float) -> None:
        previous = self._wakes.pop(queue, None)
        if previous is not None:
            previous.cancel()
        self._wakes[queue] = asyncio.get_running_loop().call_later(
            seconds + RATE_WAKE_MARGIN_SECONDS, self._demand.want, queue)

    def close(self) -> None:
        for handle in self._wakes.values():
            handle.cancel()
        self._wakes.clear()
