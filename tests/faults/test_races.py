"""Races on one key and on one job (scenario 11), each party on a connection
of its own, all released together.

- Caller transactions adding one idempotency key at once, half of them then
  rolling back (tests/integration/test_concurrency.py has the all-commit
  case with 12 callers): one job, owned by a caller that committed; every
  caller, winner or duplicate, can still write in its transaction after the
  add; every committed caller's result names the job that exists.
- 1,000 claims racing for one pending job: one winner.

Connections are what a server has least of (max_connections is 100 on the
CI servers, shared with the other test process), so the parties are capped
by what the server has free; ``PORTQUEUE_SOAK=1`` insists on the full 100.
"""

from __future__ import annotations

import asyncio
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from portqueue import AddJobResult, DeduplicationReason, PortQueue
from portqueue.driver import execute_async
from portqueue.tx import from_psycopg
from tests.faults.harness import assert_nothing_lost, job
from tests.support.activity import waiting_on_locks
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

CALLERS = 100
CLAIMS = 1_000
# Connections left free for everything else using the server meanwhile.
HEADROOM = 30
SOAK = os.environ.get("PORTQUEUE_SOAK") == "1"


def free_connections(db: psycopg.Connection[Any], wanted: int) -> int:
    """``wanted``, or fewer if the server cannot spare that many right now."""
    row = db.execute("SELECT current_setting('max_connections')::int - "
                     "(SELECT count(*) FROM pg_stat_activity)").fetchone()
    assert row is not None
    spare = int(row[0]) - HEADROOM
    if SOAK:
        assert spare >= wanted, f"the soak needs {wanted} free connections, the server has {spare}"
    return max(min(wanted, spare), 10)


def test_caller_transactions_racing_on_one_idempotency_key_half_rolling_back(
    pq: PortQueue, pg_dsn: str, ledger_db: psycopg.Connection[Any], schema: str,
    report: Any,
) -> None:
    """A first writer adds the key and holds its transaction open until every
    caller waits on its row, then rolls back: the callers take over, and each
    winner that rolls back hands the key on to the next, until one commits."""
    db = ledger_db
    db.execute("CREATE TABLE faults.caller_write (n integer PRIMARY KEY)")
    callers = free_connections(db, CALLERS) - 1
    tag = "faults:idempotency-race"
    dsn = make_conninfo(pg_dsn, application_name=tag)

    def caller(n: int) -> tuple[AddJobResult, bool]:
        commits = n % 2 == 0
        with psycopg.connect(dsn) as conn:
            result = pq.add_job(queue="payments", data={"n": n}, idempotency_key="charge:1",
                                tx=from_psycopg(conn))
            # Not poisoned: the caller's own write still succeeds after the add.
            conn.execute("INSERT INTO faults.caller_write (n) VALUES (%s)", [n])
            (conn.commit if commits else conn.rollback)()
        return result, commits

    with psycopg.connect(pg_dsn) as first, ThreadPoolExecutor(max_workers=callers) as pool:
        held = pq.add_job(queue="payments", data={"n": -1}, idempotency_key="charge:1",
                          tx=from_psycopg(first))
        assert not held.deduplicated
        futures = [pool.submit(caller, n) for n in range(callers)]
        try:
            wait_until(lambda: waiting_on_locks(db, tag) == callers, 60,
                       f"{callers} callers to wait on the first writer's row", interval=0.02)
        finally:
            first.rollback()
        started = time.monotonic()
        outcomes = [future.result(timeout=60) for future in futures]
    elapsed = time.monotonic() - started

    written = {n for (n,) in db.execute("SELECT n FROM faults.caller_write").fetchall()}
    assert written == set(range(0, callers, 2)), "a committing caller's write was lost"
    rows = db.execute(sql.SQL("SELECT id::text, data FROM {} WHERE idempotency_key = %s")
                      .format(sql.Identifier(schema, "job")), ["charge:1"]).fetchall()
    assert len(rows) == 1, f"{len(rows)} jobs for one key"
    ((job_id, data),) = rows
    assert data["n"] % 2 == 0, f"the job belongs to caller {data['n']}, who rolled back"
    committed = [result for result, commits in outcomes if commits]
    assert {r.job_id for r in committed} == {job_id}
    winners = [r for r in committed if not r.deduplicated]
    assert [r.job_id for r in winners] == [job_id]
    assert all(r.deduplication_reason is DeduplicationReason.IDEMPOTENCY
               for r in committed if r.deduplicated)
    handed_on = sum(not r.deduplicated for r, commits in outcomes if not commits)
    figures = assert_nothing_lost(db, schema, [job_id])
    report(figures, callers=callers, rolled_back=callers // 2 + 1,
           rolled_back_winners=handed_on + 1, wall_s=f"{elapsed:.2f}")


def test_a_thousand_claims_racing_for_one_job_have_one_winner(
    pq: PortQueue, pg_dsn: str, ledger_db: psycopg.Connection[Any], schema: str,
    report: Any,
) -> None:
    db = ledger_db
    job_id = pq.add_job(queue="race", data={}).job_id
    assert job_id is not None
    connections = free_connections(db, CALLERS)
    claim = pq._settings.queries(
        "claim", queues=["race"], slots=[1], lease_seconds=[60], matching_patterns=[],
        refused_patterns=[], worker_id="00000000-0000-0000-0000-000000000001")

    async def race() -> list[list[dict[str, Any]]]:
        conns = await asyncio.gather(*(psycopg.AsyncConnection.connect(pg_dsn, autocommit=True)
                                       for _ in range(connections)))
        free: asyncio.Queue[psycopg.AsyncConnection[Any]] = asyncio.Queue()
        for conn in conns:
            free.put_nowait(conn)
        go = asyncio.Event()

        async def claimer() -> list[dict[str, Any]]:
            await go.wait()
            conn = await free.get()
            try:
                return await execute_async(conn, claim)
            finally:
                free.put_nowait(conn)

        try:
            tasks = [asyncio.ensure_future(claimer()) for _ in range(CLAIMS)]
            await asyncio.sleep(0)  # every claimer at the start line
            go.set()
            return await asyncio.gather(*tasks)
        finally:
            await asyncio.gather(*(conn.close() for conn in conns))

    started = time.monotonic()
    results = asyncio.run(race())
    elapsed = time.monotonic() - started

    wins = [rows for rows in results if rows]
    assert len(results) == CLAIMS
    assert len(wins) == 1, f"{len(wins)} claims won one job"
    ((won,),) = wins
    assert str(won["id"]) == job_id
    row = job(db, schema, job_id)
    assert (row["status"], row["attempt"], row["lease_token"]) == ("active", 1, 1)
    figures = assert_nothing_lost(db, schema, [job_id])
    report(figures, claims=CLAIMS, connections=connections, winners=len(wins),
           wall_s=f"{elapsed:.2f}")
