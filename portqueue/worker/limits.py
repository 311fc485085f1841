"""Flow control in the claim loop: which queues are limited, and claiming them.

A queue with a limit (SPEC §8) is claimed by ``claim_limited``, one queue per
transaction, after its queue row is locked; every other queue by the plain
claim, which passes over limited queues itself. Which is which is learnt from
the claims, not read on the side: the plain claim names each queue it passed
over for its limits, and the limited claim each queue that has none any
more, and the queue is claimed the other way at once. So a worker whose
queues have no limit runs nothing for flow control, and a stale view costs
one claim, never a limit. A changed limit wakes the queue's workers (the
trigger ``queue_limits_changed_notify``), so a raised one is used at once. A
claim the rate held back says when the next start is allowed, and the queue
is claimed again then: a rate-limited queue is not polled.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Any

import psycopg

from portqueue import worker_operations as ops
from portqueue.driver import transaction_async
from portqueue.queries import Query
from portqueue.worker.demand import Demand
from portqueue.worker.state import Claimed

# A rate-limited queue is claimed again this long after its window allows a
# start, so the start it waited for is inside the window the claim counts.
RATE_WAKE_MARGIN_SECONDS = 0.005


class Limits:
    def __init__(self, demand: Demand) -> None:
        self._demand = demand
        self._limited: set[str] = set()
        self._wakes: dict[str, asyncio.TimerHandle] = {}

    @property
    def queues(self) -> set[str]:
        """The queues this worker claims with the limited claim."""
        return self._limited

    def limited(self, queue: str) -> bool:
        return queue in self._limited

    def learn(self, rows: Iterable[Claimed]) -> tuple[list[Claimed], list[str]]:
        """A claim's rows without the markers, and the queues that just turned
        limited (to claim now, the limited way). A queue that lost its limits
        is wanted again, for the plain claim."""
        claimed: list[Claimed] = []
        turned: list[str] = []
        for row in rows:
            if row.status == ops.LIMITED:
                self._limited.add(row.queue)
                turned.append(row.queue)
            elif row.status == ops.UNLIMITED:
                self._limited.discard(row.queue)
                self._demand.want(row.queue)
            elif row.status == ops.RATE_LIMITED:
                self._wake_at(row.queue, float(row.data_json))
            else:
                claimed.append(row)
        return claimed, turned

    def refillable(self, queue: str) -> bool:
        """Whether freed slots of ``queue`` are worth claiming now: limited, and
        not held back by its rate until a set time."""
        return queue in self._limited and queue not in self._wakes

    def freed(self, queues: Iterable[str]) -> None:
        """Outcomes of these queues' jobs committed: a limited one has a slot
        free in the database now, so it is claimed again at once, without
        waiting for the NOTIFY that commit sent. Not one the rate holds back
        until a set time (a finished job frees no start): its wake is due then."""
        for queue in queues:
            if queue in self._limited and queue not in self._wakes:
                self._demand.want(queue)

    async def claim(self, conn: psycopg.AsyncConnection[Any],
                    transaction: Sequence[Query]) -> list[Claimed]:
        """A limited claim (``ops.claims``: the lock, then ``claim_limited``), in
        one transaction and one round trip; its rows, markers included."""
        lock, claim = transaction
        # One round trip (transaction_async): the lock, the claim and the
        # commit pipelined, the rows read once all of it is done. The server
        # still runs them in turn, so the claim's snapshot is taken once the
        # lock is held, and the lock is released by the commit that follows
        # the claim at once, not after the rows have crossed to this process
        # and back.
        _, rows = await transaction_async(conn, [(lock, None), (claim, Claimed.rows)])
        return rows

    def _wake_at(self, queue: str, seconds: float) -> None:
        previous = self._wakes.pop(queue, None)
        if previous is not None:
            previous.cancel()
        self._wakes[queue] = asyncio.get_running_loop().call_later(
            seconds + RATE_WAKE_MARGIN_SECONDS, self._rate_allows, queue)

    def _rate_allows(self, queue: str) -> None:
        del self._wakes[queue]
        self._demand.want(queue)

    def close(self) -> None:
        for handle in self._wakes.values():
            handle.cancel()
        self._wakes.clear()
