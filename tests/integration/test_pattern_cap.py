"""Issue 16, the verdict cap (portqueue.worker.patterns): a worker that meets
more than 1,000 distinct patterns loses no job, starves none, and holds a
bounded number of verdicts.

The patterns are written by SQL, one job each, at a higher priority than the
plain jobs behind them, none matching the worker but one. Under the old cap
of 1,000 verdicts, forgotten first-judged, every claim met 500 patterns it had
forgotten, as unjudged rows that took every slot: judging four of them forgot
four others, and no job behind them ever ran. The cap is now by count and by
bytes of pattern text, far above such a mix (MAX_VERDICTS, MAX_VERDICT_BYTES).
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest
from psycopg import sql

from portqueue.worker import patterns
from portqueue.worker.patterns import MAX_VERDICT_BYTES, MAX_VERDICTS, PatternVerdicts
from tests.support.waiting import wait_until
from tests.support.workers import SyncHarness

Db = psycopg.Connection[Any]
QUEUE = "render"
# The worker's key is test-host-ram-8gb (tests/conftest.py): none of these match.
DISTINCT = 1_500


def insert_distinct_patterns(db: Db, schema: str, count: int, *, priority: int) -> list[str]:
    rows = db.execute(sql.SQL(
        "INSERT INTO {} (id, queue, data, priority, preferred_instance_key_pattern) "
        "SELECT gen_random_uuid(), %s, '{{}}', %s, '^gpu-' || n || '$' "
        "FROM generate_series(1, %s) AS n RETURNING id::text").format(
            sql.Identifier(schema, "job")), [QUEUE, priority, count]).fetchall()
    return [row[0] for row in rows]


def test_a_worker_past_the_verdict_cap_runs_every_job_it_can_and_keeps_the_rest(
    harness: SyncHarness, db: Db, schema: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # More judged per claim than the worker's 4: the same verdicts in fewer
    # claims (each still judges each pattern under its own deadline).
    monkeypatch.setattr(patterns, "MAX_JUDGED_PER_CLAIM", 64)
    pq = harness.pq
    ran: list[str] = []
    lock = threading.Lock()

    def handler(job: Any) -> None:
        with lock:
            ran.append(job.id)

    pq.create_queue(queue=QUEUE, handler=handler, concurrency=10)
    unmatched = insert_distinct_patterns(db, schema, DISTINCT, priority=10)
    matching = pq.add_job(queue=QUEUE, data={}, priority=5,
                          preferred_instance_key_pattern="^test-host").job_id
    plain = [r.job_id for r in pq.add_jobs(queue=QUEUE, jobs=[{"data": {"n": n}}
                                                            for n in range(30)])]
    harness.start(poll_interval=0.05)
    wait_until(lambda: len(ran) == len(plain) + 1, timeout=120,
               what="the plain jobs and the matching one, behind the unmatched patterns")
    assert sorted(ran) == sorted([*plain, matching])
    # None of the others was claimed, lost or spent an attempt: all still pending.
    row = db.execute(sql.SQL(
        "SELECT count(*), count(*) FILTER (WHERE status = 'pending' AND attempt = 0) FROM {} "
        "WHERE id = ANY(%s::uuid[])").format(sql.Identifier(schema, "job")),
        [unmatched]).fetchone()
    assert row == (DISTINCT, DISTINCT)


def test_verdicts_past_the_cap_stay_bounded() -> None:
    verdicts = PatternVerdicts("test-host")
    for n in range(MAX_VERDICTS + 5_000):
        verdicts.remember(f"^gpu-{n}$", n % 7 == 0, timed_out=n % 3 == 0)
    params = verdicts.claim_params()
    judged = params["matching_patterns"] + params["refused_patterns"]
    assert len(judged) == MAX_VERDICTS
    assert min(judged, key=lambda p: int(p[5:-1])) == "^gpu-5000$"  # the oldest went first
    assert len(verdicts._rejudge_at) <= MAX_VERDICTS
    assert patterns.MAX_JUDGED_PER_CLAIM >= 1


def test_long_patterns_are_bounded_by_their_bytes() -> None:
    verdicts = PatternVerdicts("test-host")
    for n in range(3_000):
        verdicts.remember(f"^{n:06}" + "é" * 250 + "$", False)  # 508 bytes each
    refused = verdicts.claim_params()["refused_patterns"]
    sent = sum(len(p.encode()) for p in refused)
    assert MAX_VERDICT_BYTES - 508 < sent <= MAX_VERDICT_BYTES
    assert refused[-1].startswith("^002999")
    # One pattern longer than the whole bound is kept alone, judged once.
    verdicts.remember("x" * (MAX_VERDICT_BYTES + 1), False)
    assert verdicts.claim_params()["refused_patterns"] == ["x" * (MAX_VERDICT_BYTES + 1)]
