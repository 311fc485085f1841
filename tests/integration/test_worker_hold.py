"""Claims ahead (portqueue/worker/hold.py): bounded by what a queue starts
during one claim's round trip, visible in the table, released on stop."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from portqueue import PortQueue
from tests.support.waiting import wait_until
from tests.support.workers import START_DEFAULTS, SyncHarness

Db = psycopg.Connection[Any]


def rows(db: Db, schema: str, ids: list[str]) -> list[dict[str, Any]]:
    with db.cursor(row_factory=dict_row) as cursor:
        return cursor.execute(sql.SQL(
            "SELECT id::text, status::text, started_at, attempt, worker_id::text "
            "FROM {} WHERE id = ANY(%s::uuid[])").format(sql.Identifier(schema, "job")),
            (ids,)).fetchall()


def test_two_workers_of_slow_handlers_share_a_backlog(
    pg_dsn: str, schema: str, db: Db, pq: PortQueue,
) -> None:
    """The first worker has measured its handlers when the second starts: a
    hold bounded only in jobs (4 x concurrency) would let it claim all that is
    left; bounded in time, a slow queue holds nothing and both take turns."""
    clients = [PortQueue(pg_dsn, schema=schema) for _ in range(2)]
    ran: Counter[int] = Counter()
    try:
        for n, client in enumerate(clients):
            @client.handler("slow", concurrency=10)
            def handler(job: Any, n: int = n) -> None:
                ran[n] += 1
                time.sleep(0.3)

        ids = [j.job_id for j in pq.add_jobs(queue="slow", jobs=[{"data": {}}] * 50)]
        clients[0].start(**START_DEFAULTS, claim_ahead=True)
        wait_until(lambda: ran[0] > 10, 20, "the first worker to finish some jobs")
        clients[1].start(**START_DEFAULTS, claim_ahead=True)
        wait_until(lambda: all(r["status"] == "completed" for r in rows(db, schema, ids)), 30,
                   "the backlog to drain")
    finally:
        for client in clients:
            client.stop(abort=True)
            client.close()
    by_worker = Counter(r["worker_id"] for r in rows(db, schema, ids))
    assert len(by_worker) == 2, f"one worker took the whole backlog: {by_worker}"
    assert all(r["started_at"] is not None for r in rows(db, schema, ids))


def held_rows(db: Db, schema: str, ids: list[str]) -> Callable[[], list[dict[str, Any]]]:
    return lambda: [r for r in rows(db, schema, ids)
                    if r["status"] == "active" and r["started_at"] is None]


def test_held_jobs_are_active_unstarted_and_released_at_once_on_stop(
    harness: SyncHarness, db: Db, schema: str,
) -> None:
    pq = harness.pq
    gate = harness.gate()
    blocked: list[str] = []

    @pq.handler("ahead", concurrency=2)
    async def handler(job: Any) -> None:
        if job.data.get("block"):
            blocked.append(job.id)
            # Waits on a thread's event without holding the loop.
            await asyncio.to_thread(gate.wait, 20)

    harness.start(claim_ahead=True)
    warm = [j.job_id for j in pq.add_jobs(queue="ahead", jobs=[{"data": {}}] * 20)]
    wait_until(lambda: all(r["status"] == "completed" for r in rows(db, schema, warm)), 20,
               "the warm-up jobs (the worker measures its handlers and claims)")
    batch = [j.job_id for j in pq.add_jobs(
        queue="ahead", jobs=[{"data": {"block": True}}] * 2 + [{"data": {}}] * 10)]
    held = wait_until(held_rows(db, schema, batch[2:]), 20, "jobs held ahead")
    assert sorted(blocked) == sorted(batch[:2]), "held jobs wait for a free slot"
    stopper = threading.Thread(target=pq.stop)
    stopper.start()
    try:
        # Released while the blocked handlers still run: not after the drain.
        wait_until(lambda: all(r["status"] == "pending" for r in rows(
            db, schema, [h["id"] for h in held])), 10, "the held jobs released")
        assert all(r["status"] == "active" for r in rows(db, schema, batch[:2]))
    finally:
        gate.set()
        stopper.join(20)
    for row in rows(db, schema, [h["id"] for h in held]):
        assert (row["status"], row["attempt"], row["started_at"], row["worker_id"]) == (
            "pending", 0, None, None), "released with the attempt not spent"
