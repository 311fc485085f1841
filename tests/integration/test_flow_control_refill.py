"""A limited queue's freed slot is claimed again in the transaction of the
outcome that frees it (portqueue/worker/refill.py, ``Fetcher.refill_claims``):
no claim of its own after the outcome's commit, no wait for a NOTIFY."""

from __future__ import annotations

import itertools
import statistics
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg import sql

from portqueue import AsyncPortQueue, PortQueue
from portqueue.worker.completer import SPLIT_MIN
from portqueue.worker.job import Job
from tests.pgbouncer import mode
from tests.support.waiting import wait_until, wait_until_async
from tests.support.workers import SyncHarness

Db = psycopg.Connection[Any]


def xmins(db: Db, schema: str, queue: str) -> dict[str, tuple[str, str]]:
    """Job id -> (status, the transaction that last wrote its row)."""
    rows = db.execute(sql.SQL(
        "SELECT id::text, status::text, xmin::text FROM {} WHERE queue = %s").format(
            sql.Identifier(schema, "job")), [queue]).fetchall()
    return {job_id: (status, xmin) for job_id, status, xmin in rows}


def left(db: Db, schema: str, queue: str) -> int:
    """The queue's jobs not finished yet."""
    (n,) = db.execute(sql.SQL(
        "SELECT count(*) FROM {} WHERE queue = %s AND finished_at IS NULL").format(
            sql.Identifier(schema, "job")), [queue]).fetchone() or (0,)
    return int(n)


@pytest.mark.parametrize("limits", [{"global_concurrency": 1}, {"partition_concurrency": 1}],
                         ids=["global", "per-key"])
def test_an_outcome_claims_the_slot_it_frees_in_its_own_transaction(
    client: PortQueue, harness: SyncHarness, db: Db, pg_dsn: str, schema: str,
    limits: dict[str, Any],
) -> None:
    # Each job's handler reads which transaction wrote its row: the claim that
    # started it. With one slot, the jobs run in turn, and each one after the
    # first must have been started by the transaction that wrote the outcome
    # of the one before it (a completion, or a failure).
    seen: list[tuple[str, str]] = []
    lock = threading.Lock()
    with psycopg.connect(pg_dsn, autocommit=True) as own:

        def handler(job: Job) -> None:
            with lock:
                (xmin,) = own.execute(sql.SQL("SELECT xmin::text FROM {} WHERE id = %s").format(
                    sql.Identifier(schema, "job")), [job.id]).fetchone() or ("",)
                seen.append((job.id, xmin))
            if job.data == "fail":
                raise RuntimeError("a failure frees its slot too")

        client.create_queue(queue="refill", handler=handler, concurrency=1,
                            retry={"max_attempts": 1}, **limits)
        client.add_jobs(queue="refill", jobs=[
            {"data": "fail" if n == 2 else n, "partition_key": "k"} for n in range(6)])
        harness.start()
        wait_until(lambda: all(status in ("completed", "failed")
                               for status, _ in xmins(db, schema, "refill").values()),
                   15, "every job to finish")
    final = xmins(db, schema, "refill")
    assert [final[job_id][0] for job_id, _ in seen].count("failed") == 1
    assert len(seen) == 6
    for (previous, _), (_, started_by) in itertools.pairwise(seen):
        assert started_by == final[previous][1], (
            "a job was started by a claim of its own, not by the outcome that freed its slot")


@pytest.mark.parametrize("concurrency", [20, 50], ids=["slots-at-the-limit", "more-slots"])
def test_a_limited_drain_never_waits_for_the_poll(
    client: PortQueue, harness: SyncHarness, db: Db, schema: str, concurrency: int,
) -> None:
    # The bench's global100 drain in small (a worker whose slots equal the
    # limit, and one with more slots than the limit): short jobs, slots freed
    # and refilled many times a second. The worker polls once a minute, so a
    # freed slot's wake-up lost once (a slot count drifting, an outcome's
    # commit that nobody claims after) would hold the queue until the poll:
    # the drain (a few seconds, tens on a loaded machine) must end before it.
    if mode.poll_only():
        pytest.skip("poll_only workers hear no wake-up: they claim again at their poll")

    def handler(job: Job) -> None:
        return None

    client.create_queue(queue="burst", handler=handler, concurrency=concurrency,
                        global_concurrency=20)
    client.add_jobs(queue="burst", jobs=[{"data": n} for n in range(500)])
    harness.start(poll_interval=60.0)

    wait_until(lambda: left(db, schema, "burst") == 0, 50,
               "the limited queue to drain without a poll", interval=0.05)
    (attempts,) = db.execute(sql.SQL("SELECT max(attempt) FROM {} WHERE queue = 'burst'").format(
        sql.Identifier(schema, "job"))).fetchone() or (0,)
    assert attempts == 1


async def test_a_limited_queues_outcomes_are_written_in_halves_that_hold_the_limit(
    apq_factory: Callable[..., AsyncPortQueue], pq: PortQueue, db: Db, schema: str,
) -> None:
    # The bench's global100 drain in small: slots equal to the limit, no-op
    # jobs, so each claim's jobs finish together and their outcomes make one
    # batch. The completer writes such a batch in two halves side by side
    # (completer.SPLIT_MIN), each half claiming again only the slots its own
    # outcomes free: after the first claim, claims start half the slots (one
    # write of the whole batch claimed them all at once). And
    # the two halves' claims, in flight together, never run past the limit:
    # at each claim's instant (its statement's clock, after the outcomes
    # that freed its slots), the jobs started and not yet finished are at
    # most the limit.
    slots = 2 * SPLIT_MIN
    apq = apq_factory(application_name="halves")

    @apq.handler("halves", concurrency=slots)
    async def handler(job: Any) -> None:
        return None

    pq.add_jobs(queue="halves", jobs=[{"data": n} for n in range(20 * slots)])
    pq.set_queue_limits(queue="halves", global_concurrency=slots)
    await apq.start(poll_interval=60.0)
    try:
        await wait_until_async(lambda: left(db, schema, "halves") == 0, 60,
                               "the limited queue to drain")
    finally:
        await apq.stop()
        await apq.aclose()
    rows = db.execute(sql.SQL(
        "SELECT started_at, finished_at, attempt FROM {} WHERE queue = 'halves'").format(
            sql.Identifier(schema, "job"))).fetchall()
    assert {attempt for _, _, attempt in rows} == {1}
    claims = sorted(Counter(started for started, _, _ in rows).items())
    # Most, not all: on a loaded machine the outcomes of one claim can come in
    # two batches, one of them written whole while the other half's write is
    # in flight (claims of 32 and 96 in turn); whole writes would claim every
    # slot each time.
    sizes = [n for _, n in claims[1:]]
    assert statistics.median(sizes) <= slots // 2, sizes
    for instant, _ in claims:
        running = sum(1 for started, finished, _ in rows if started <= instant < finished)
        assert running <= slots, (instant, running)
