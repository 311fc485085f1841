"""The rescuer raced by five processes at once: 500 jobs made active with
lapsed leases by SQL, then rescued, each exactly once (one LeaseExpired entry,
attempt untouched: the rescuer never bumps it, the next claim does), with no
deadlock or other database error anywhere.

``service``: five processes running ``Rescuer.run_once()`` in a loop, the code
every worker runs (small batches, so they take turns on its advisory lock).
``raw``: five processes running the ``rescue_lapsed`` statement itself with
no advisory lock, so the guarded UPDATE alone has to keep each rescue single.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from portqueue import PortQueue
from tests.faults.harness import (
    QUEUE,
    Fleet,
    assert_nothing_lost,
    wait_barrier_waiters,
)
from tests.support.locks import HeldLock

JOBS = 500
PROCESSES = 5
BARRIER = 7006


def make_lapsed(db: psycopg.Connection[Any], schema: str, job_ids: list[str]) -> None:
    """Active, leased by a worker that is gone: half on attempt 1 of 3 (back
    to pending when rescued), half on their last attempt (to failed)."""
    db.execute(sql.SQL("""
        UPDATE {job} SET status = 'active', started_at = now() - interval '1 minute',
               attempt = CASE WHEN seq %% 2 = 0 THEN 1 ELSE max_attempts END,
               lease_token = 1, lease_expires_at = now() - interval '1 second',
               worker_id = gen_random_uuid()
        WHERE id = ANY(%s::uuid[])
    """).format(job=sql.Identifier(schema, "job")), [job_ids])


@pytest.mark.parametrize("mode", ["service", "raw"])
def test_five_rescuers_racing_rescue_each_lapsed_job_exactly_once(
    mode: str, pq: PortQueue, fleet: Fleet, ledger_db: psycopg.Connection[Any], schema: str,
    pg_dsn: str, report: Any,
) -> None:
    db = ledger_db
    results = pq.add_jobs(queue=QUEUE, jobs=[{"data": {"n": n}, "retry": {"max_attempts": 3}}
                                             for n in range(JOBS)])
    job_ids = [r.job_id for r in results if r.job_id is not None]
    make_lapsed(db, schema, job_ids)
    with db.cursor(row_factory=dict_row) as cursor:
        before = {row["id"]: row["attempt"] for row in cursor.execute(sql.SQL(
            "SELECT id::text, attempt FROM {} WHERE id = ANY(%s::uuid[])").format(
                sql.Identifier(schema, "job")), [job_ids])}

    with HeldLock(pg_dsn, BARRIER):
        procs = [fleet.python("tests.faults.rescue_race", mode, str(BARRIER))
                 for _ in range(PROCESSES)]
        wait_barrier_waiters(db, BARRIER, PROCESSES)
        started = time.monotonic()
    codes = [proc.wait(60) for proc in procs]
    elapsed = time.monotonic() - started

    outputs = [proc.log() for proc in procs]
    for proc, code, output in zip(procs, codes, outputs, strict=True):
        assert code == 0, f"{proc.name} exited {code}\n{output}"
        assert "deadlock" not in output.lower(), output
        assert "Traceback" not in output, output
    summaries = [json.loads(output.split("RESULT ", 1)[1]) for output in outputs]
    assert all(s["errors"] == [] for s in summaries), summaries
    assert sum(s["rescued"] for s in summaries) == JOBS, summaries

    with db.cursor(row_factory=dict_row) as cursor:
        rows = cursor.execute(sql.SQL(
            "SELECT id::text, status::text AS status, attempt, max_attempts, errors "
            "FROM {} WHERE id = ANY(%s::uuid[])").format(sql.Identifier(schema, "job")),
            [job_ids]).fetchall()
    problems = []
    for row in rows:
        expired = [e for e in row["errors"] if e["type"] == "LeaseExpired"]
        expected = "failed" if row["attempt"] >= row["max_attempts"] else "pending"
        if len(expired) != 1 or len(row["errors"]) != 1:
            problems.append(f"{row['id']}: {len(row['errors'])} error entries: {row['errors']}")
        elif expired[0]["attempt"] != row["attempt"]:
            problems.append(f"{row['id']}: LeaseExpired names attempt {expired[0]['attempt']}")
        if row["attempt"] != before[row["id"]]:
            problems.append(f"{row['id']}: attempt {before[row['id']]} -> {row['attempt']}")
        if row["status"] != expected:
            problems.append(f"{row['id']}: {row['status']}, expected {expected}")
    assert not problems, "\n".join(problems[:20])
    figures = assert_nothing_lost(db, schema, job_ids)
    assert figures.statuses == {"failed": JOBS // 2, "pending": JOBS // 2}
    acted = sum(1 for s in summaries if s["rescued"])
    report(figures, faults=f"{JOBS} lapsed leases", racers=PROCESSES, racers_that_rescued=acted,
           rescued_per_racer=sorted(Counter({s["pid"]: s["rescued"]
                                             for s in summaries}).values()),
           passes=sum(s["passes"] for s in summaries), wall_s=f"{elapsed:.1f}")
