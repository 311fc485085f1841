"""Issue 16.1 and 16.2, in depth: whatever patterns reach the job table (here
written by SQL, past every producer check), no row fails the claim of other
jobs, and patterns slow to compile do not slow every claim.

The claim evaluates no pattern; each worker judges each distinct pattern once,
in a statement of its own under a deadline (portqueue.worker.patterns).
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Sequence
from typing import Any

import psycopg
import pytest
from psycopg import sql

from portqueue import PortQueue
from portqueue.queries import queries_for
from portqueue.worker import patterns
from portqueue.worker.patterns import PatternVerdicts
from portqueue.worker.state import Claimed
from tests.support.rows import job_row
from tests.support.waiting import wait_until
from tests.support.workers import SyncHarness

Db = psycopg.Connection[Any]

TOO_COMPLEX = "((a{0,20}){0,20}){0,20}b"  # PostgreSQL refuses it, after seconds of CPU
INVALID = "(a"  # PostgreSQL refuses it at once
# Each slow to compile (docs/performance.md); PostgreSQL caches 32 compiled
# patterns per session, and these are more.
SLOW = [f"(a{{0,255}}){{39}}b{n}" for n in range(40)]


def insert_patterned(db: Db, schema: str, queue: str, pattern: str, *, priority: int,
                     count: int = 1) -> list[str]:
    """Jobs naming ``pattern``, written as SQL would, past every producer check."""
    rows = db.execute(sql.SQL(
        "INSERT INTO {} (id, queue, data, priority, preferred_instance_key_pattern) "
        "SELECT gen_random_uuid(), %s, '{{}}', %s, %s FROM generate_series(1, %s) "
        "RETURNING id::text").format(sql.Identifier(schema, "job")),
        [queue, priority, pattern, count]).fetchall()
    return [row[0] for row in rows]


def counting_handler() -> tuple[Any, list[str]]:
    ran: list[str] = []
    lock = threading.Lock()

    def handler(job: Any) -> None:
        with lock:
            ran.append(job.id)

    return handler, ran


def test_patterns_postgres_refuses_stop_no_claim(
    harness: SyncHarness, db: Db, schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    pq = harness.pq
    handler, ran = counting_handler()
    pq.create_queue(queue="render", handler=handler, concurrency=5)
    pq.create_queue(queue="mail", handler=handler, concurrency=5)
    plain = [pq.add_job(queue="render", data={"n": n}).job_id for n in range(20)]
    plain += [pq.add_job(queue="mail", data={"n": n}).job_id for n in range(5)]
    matching = pq.add_job(queue="render", data={}, preferred_instance_key_pattern="^test-host",
                          priority=-1).job_id
    refused = (insert_patterned(db, schema, "render", TOO_COMPLEX, priority=10, count=3)
               + insert_patterned(db, schema, "render", INVALID, priority=10, count=3))

    with caplog.at_level(logging.WARNING, logger="portqueue.worker"):
        harness.start(poll_interval=0.05)
        wait_until(lambda: len(ran) == len(plain) + 1, timeout=60, what="every other job")
    assert set(ran) == {*plain, matching}
    for job_id in refused:
        row = job_row(db, schema, job_id)
        assert (row["status"], row["attempt"]) == ("pending", 0)
    # One line per pattern, however many claims met it.
    judged = [r.getMessage() for r in caplog.records if "never matched" in r.getMessage()]
    assert len(judged) == 2, judged
    assert not [r for r in caplog.records if "claim failed" in r.getMessage()]


def test_slow_patterns_at_a_higher_priority_do_not_slow_every_claim(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    # Before: each claim compiled the forty again (the session's cache holds
    # 32), so few plain jobs ran at all (docs/performance.md). Now each is
    # judged once, within patterns.JUDGE_DEADLINE_MS.
    pq = harness.pq
    handler, ran = counting_handler()
    pq.create_queue(queue="render", handler=handler, concurrency=10)
    plain = [added.job_id for added in
             pq.add_jobs(queue="render", jobs=[{"data": n} for n in range(100)])]
    for pattern in SLOW:
        insert_patterned(db, schema, "render", pattern, priority=5)
    harness.start(poll_interval=0.05)
    wait_until(lambda: len(ran) == len(plain), timeout=60, what="the plain jobs")
    assert set(ran) == set(plain)


def test_a_worker_without_a_key_claims_no_patterned_job(
    pg_dsn: str, db: Db, schema: str
) -> None:
    with PortQueue(pg_dsn, schema=schema) as keyless:
        harness = SyncHarness(keyless)
        handler, ran = counting_handler()
        keyless.create_queue(queue="render", handler=handler)
        plain = keyless.add_job(queue="render", data={}).job_id
        patterned = insert_patterned(db, schema, "render", ".*", priority=5)
        try:
            harness.start(poll_interval=0.05)
            wait_until(lambda: ran == [plain], what="the plain job")
        finally:
            harness.close()
        assert job_row(db, schema, patterned[0])["status"] == "pending"


# --- the claim statement itself: it evaluates no pattern ---


def claim(db: Db, schema: str, *, matching: Sequence[str], refused: Sequence[str],
          slots: int = 10) -> list[dict[str, Any]]:
    query = queries_for(schema)(
        "claim", queues=["render"], slots=[slots], lease_seconds=[60],
        worker_id=str(uuid.uuid4()), matching_patterns=list(matching),
        refused_patterns=list(refused))
    with db.cursor(row_factory=psycopg.rows.dict_row) as cursor:
        return cursor.execute(query.sql, dict(query.params)).fetchall()


def test_the_claim_never_compiles_a_pattern(pq: PortQueue, db: Db, schema: str) -> None:
    plain = pq.add_job(queue="render", data={}).job_id
    (bad,) = insert_patterned(db, schema, "render", INVALID, priority=5)
    (good,) = insert_patterned(db, schema, "render", "^test-", priority=5)
    # Not judged yet: reported, not claimed, and no error.
    rows = claim(db, schema, matching=[], refused=[])
    assert sorted((row["status"], row["data_json"]) for row in rows) == [
        ("active", '{}'), ("unjudged", INVALID), ("unjudged", "^test-")]
    assert {job_row(db, schema, job)["status"] for job in (bad, good)} == {"pending"}
    # Judged: the match is claimed, the refused one passed over.
    db.execute(sql.SQL("UPDATE {} SET status = 'pending', attempt = 0 WHERE id = %s").format(
        sql.Identifier(schema, "job")), [plain])
    rows = claim(db, schema, matching=["^test-"], refused=[INVALID])
    assert sorted(row["id"] for row in rows) == sorted([plain, good])
    assert {row["status"] for row in rows} == {"active"}
    assert job_row(db, schema, bad)["status"] == "pending"


def test_verdicts_are_bounded() -> None:
    verdicts = PatternVerdicts("host-1")
    for n in range(patterns.MAX_VERDICTS + 50):
        verdicts._remember(f"p{n}", n % 2 == 0)
    verdicts._rebuild()
    params = verdicts.claim_params()
    judged = params["matching_patterns"] + params["refused_patterns"]
    assert len(judged) == patterns.MAX_VERDICTS
    assert min(judged, key=lambda p: int(p[1:])) == "p50"  # the oldest went first
    assert not set(params["matching_patterns"]) & set(params["refused_patterns"])


async def test_judging_never_raises_between_a_claim_and_its_start(pg_dsn: str) -> None:
    # The claim has committed when the judging runs: an error escaping it would
    # leave the claimed jobs active with no runner. A broken connection leaves
    # the pattern unjudged instead, for a later claim.
    conn = await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True)
    await conn.close()
    verdicts = PatternVerdicts("host-1")
    row = Claimed("id", "render", patterns.UNJUDGED, "^host-", *[None] * 12)  # type: ignore[arg-type]
    await verdicts.judge_unjudged(conn, queries_for("pq_test"), [row])
    assert verdicts.claim_params() == {"matching_patterns": [], "refused_patterns": []}
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as live:
        await verdicts.judge_unjudged(live, queries_for("pq_test"), [row])
    assert verdicts.claim_params()["matching_patterns"] == ["^host-"]
