"""The refill: claims of limited queues sent in the transaction of the
outcomes that free their slots.

A limited queue's slot is free in the database only once the outcome of a
job of it commits; a claim after that commit costs one more round trip and
one more wake-up per cycle. So the completer's write carries the fetcher's
limited claims for the queues its outcomes free (``Fetcher.refill_claims``),
and the claimed jobs start as a claim of the fetcher's loop would start
them (``Fetcher.refilled``). Skipped while the fetcher claims (the
completer never waits for it), and whenever the claims would be refused:
the outcomes are then written alone. Two may be in flight at once (the
completer's write beside its main one): the database takes their claims in
turn (``lock_limited_queue``), the fetcher keeps their slots apart
(``Fetcher.refill_claims``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

import psycopg

from portqueue.availability import is_unavailable
from portqueue.driver import transaction_async
from portqueue.queries import Query
from portqueue.worker.connections import Connections
from portqueue.worker.state import Claimed

log = logging.getLogger("portqueue.worker")

Results = list[list[dict[str, Any]]]


class Claims(Protocol):
    """The fetcher, as the refill sees it."""

    def refills(self, queues: Iterable[str]) -> bool:
        ...

    def limited(self, queues: Iterable[str]) -> set[str]:
        ...

    def refill_claims(self, freeing: Mapping[str, int], unwritten: Mapping[str, int],
                      ) -> tuple[dict[str, int], list[list[Query]]]:
        ...

    async def refilled(self, conn: psycopg.AsyncConnection[Any], asked: Mapping[str, int],
                       rows: list[Claimed]) -> None:
        ...

    def refill_ended(self, asked: Mapping[str, int]) -> None:
        ...


class Refill:
    def __init__(self, connections: Connections, claims: Claims, worker_id: str) -> None:
        self._connections = connections
        self._claims = claims
        self._worker_id = worker_id

    def claims_for(self, queues: Iterable[str]) -> bool:
        """Whether outcomes of these queues' jobs would claim with them (a
        look, no more: ``write`` decides)."""
        return self._claims.refills(queues)

    def limited(self, queues: Iterable[str]) -> set[str]:
        """Those of ``queues`` claimed with claim_limited: their outcomes free
        slots other workers may wait for."""
        return self._claims.limited(queues)

    async def write(self, queries: list[Query], freeing: Mapping[str, int],
                    unwritten: Mapping[str, int], *,
                    beside: bool = False) -> tuple[Results, set[str]] | None:
        """Write the outcomes' ``queries`` with the claims of the limited
        queues among ``freeing`` (slots these outcomes free, by queue;
        ``unwritten``: those of every outcome still to be written, these
        included), in one transaction and round trip: their results, and the
        queues so claimed. On a pool session; ``beside`` (the completer's
        write beside its main one) on the claim session, as the plain claim
        and the outcomes' writes overlap on these two: the fetcher claims no
        queue whose outcomes are unwritten, and a claim of another queue (or
        a heartbeat) waits for the session, one write at most. None when
        there was nothing to claim with them, or the claims were refused: the
        caller writes the outcomes alone."""
        claims = self._claims
        asked, transactions = claims.refill_claims(freeing, unwritten)
        if not transactions:
            return None
        try:
            return await self._write(queries, asked, transactions, beside), set(asked)
        except psycopg.Error as exc:
            if isinstance(exc, psycopg.OperationalError) or is_unavailable(exc):
                raise
            # The claim's refusal must not cost the outcomes: they are
            # written alone, and the fetcher claims as it would.
            log.warning("worker %s: claiming with the outcomes failed (%s); "
                        "writing them alone", self._worker_id, exc)
            return None
        finally:
            claims.refill_ended(asked)

    async def _write(self, queries: list[Query], asked: Mapping[str, int],
                     transactions: list[list[Query]], beside: bool) -> Results:
        statements: list[tuple[Query, Any]] = [(query, None) for query in queries]
        for lock, claim in transactions:  # ops.claims: each limited claim is the two
            statements += [(lock, None), (claim, Claimed.rows)]
        session = self._connections.claims.use() if beside else self._connections.pooled()
        async with session as conn:
            results = await self._connections.within(conn, transaction_async(conn, statements))
            claimed = [row for rows in results[len(queries) + 1::2] for row in rows]
            await self._claims.refilled(conn, asked, claimed)
        return results[:len(queries)]
