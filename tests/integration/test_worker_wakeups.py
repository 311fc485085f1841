"""SPEC §4, wake-ups: NOTIFY starts a committed job within milliseconds, a lost
LISTEN connection is re-established and followed by an immediate poll, and
``poll_only=True`` (PgBouncer transaction mode) works without LISTEN.

The poll interval is set long (5 s) wherever NOTIFY or the reconnect is what
is tested, so a poll cannot be what started the job. Latency is asserted
loosely here; bench/ measures it properly."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable
from typing import Any

import psycopg

from portqueue import AsyncPortQueue, CancelOutcome, PortQueue
from tests.support.waiting import wait_until, wait_until_async
from tests.support.workers import AsyncHarness, SyncHarness, finished_row, row_where

Db = psycopg.Connection[Any]
SAMPLES = 20
SLOW_POLL = 5.0


def backends(db: Db, application_name: str) -> list[int]:
    """Pids of this database's connections with ``application_name``."""
    rows = db.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
        "AND application_name = %s", [application_name]).fetchall()
    return [row[0] for row in rows]


def test_an_idle_worker_starts_a_committed_job_within_milliseconds(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    pq = harness.pq
    started: dict[int, float] = {}

    @pq.handler("latency")
    def handler(job: Any) -> None:
        started[job.data] = time.monotonic()

    harness.start(poll_interval=SLOW_POLL)
    wait_until(lambda: backends(db, "portqueue:listener"), what="the LISTEN connection")
    latencies = []
    for n in range(SAMPLES):
        before = time.monotonic()
        job_id = pq.add_job(queue="latency", data=n).job_id  # returns once committed
        assert job_id
        wait_until(lambda: finished_row(db, schema, job_id), timeout=3,  # noqa: B023
                   what=f"job {n}")
        latencies.append(started[n] - before)
    median = statistics.median(latencies)
    print(f"commit-to-start latency (sync handler): median {median * 1000:.1f} ms, "
          f"max {max(latencies) * 1000:.1f} ms over {SAMPLES}")
    assert median < 0.05, f"median commit-to-start {median * 1000:.1f} ms"


async def test_an_idle_async_worker_starts_a_committed_job_within_milliseconds(
    aharness: AsyncHarness, db: Db, schema: str
) -> None:
    apq = aharness.apq
    started: dict[int, float] = {}
    done: dict[int, asyncio.Event] = {n: asyncio.Event() for n in range(SAMPLES)}

    @apq.handler("latency")
    async def handler(job: Any) -> None:
        started[job.data] = time.monotonic()
        done[job.data].set()

    await aharness.start(poll_interval=SLOW_POLL)
    await wait_until_async(lambda: backends(db, "portqueue:listener"), what="LISTEN connection")
    latencies = []
    for n in range(SAMPLES):
        before = time.monotonic()
        await apq.add_job(queue="latency", data=n)
        await asyncio.wait_for(done[n].wait(), 3)
        latencies.append(started[n] - before)
    median = statistics.median(latencies)
    print(f"commit-to-start latency (async handler): median {median * 1000:.1f} ms, "
          f"max {max(latencies) * 1000:.1f} ms over {SAMPLES}")
    assert median < 0.05, f"median commit-to-start {median * 1000:.1f} ms"


def test_a_killed_listen_connection_is_replaced_and_followed_by_a_poll(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    pq = harness.pq
    started: dict[str, float] = {}

    @pq.handler("resilient")
    def handler(job: Any) -> None:
        started[job.data] = time.monotonic()

    harness.start(poll_interval=SLOW_POLL)
    (listener,) = wait_until(lambda: backends(db, "portqueue:listener"), what="LISTEN conn")
    # A job started by NOTIFY: the fetcher's next poll is a full interval away.
    warm = pq.add_job(queue="resilient", data="warm-up").job_id
    assert warm
    wait_until(lambda: finished_row(db, schema, warm), timeout=2, what="the warm-up job")

    (killed,) = db.execute("SELECT pg_terminate_backend(%s)", [listener]).fetchone()  # type: ignore[misc]
    assert killed
    added_at = time.monotonic()
    job_id = pq.add_job(queue="resilient", data="after").job_id
    assert job_id
    wait_until(lambda: "after" in started, timeout=SLOW_POLL - 1,
               what="the job added after the LISTEN connection was killed")
    assert started["after"] - added_at < 1.0, (
        f"started {started['after'] - added_at:.2f}s after the add")
    replaced = wait_until(lambda: backends(db, "portqueue:listener"), what="a new LISTEN conn")
    assert listener not in replaced

    # And the new connection listens: the next job is woken by NOTIFY again.
    before = time.monotonic()
    pq.add_job(queue="resilient", data="notified")
    wait_until(lambda: "notified" in started, timeout=SLOW_POLL - 1, what="a NOTIFY wake-up")
    assert started["notified"] - before < 1.0


def test_poll_only_runs_jobs_without_listen_and_delivers_cancels(
    pg_dsn: str, db: Db, schema: str
) -> None:
    with PortQueue(pg_dsn, schema=schema, poll_only=True) as pq:
        harness = SyncHarness(pq)
        try:
            cancelled: list[str | None] = []

            @pq.handler("bouncer")
            def handler(job: Any) -> Any:
                if job.data == "long":
                    job.signal.wait(10)
                    cancelled.append(job.signal.reason)
                    return None
                return {"echo": job.data}

            ids = [r.job_id for r in pq.add_jobs(
                queue="bouncer", jobs=[{"data": n} for n in range(5)])]
            harness.start(poll_interval=0.2)
            for job_id in ids:
                assert job_id
                row = wait_until(lambda: finished_row(db, schema, job_id),  # noqa: B023
                                 what="a job under poll_only")
                assert row["status"] == "completed" and row["output"] == {"echo": row["data"]}
            assert backends(db, "portqueue:listener") == [], "poll_only opens no LISTEN"
            assert pq.add_job_and_wait(queue="bouncer", data="waited", timeout_seconds=5) == {
                "echo": "waited"}

            long = pq.add_job(queue="bouncer", data="long").job_id
            assert long
            wait_until(lambda: row_where(db, schema, long, "status = 'active'"), what="claim")
            asked = time.monotonic()
            assert pq.cancel_job(job_id=long).outcome is CancelOutcome.SIGNALLED
            wait_until(lambda: cancelled, timeout=3, what="the cancel to reach the handler")
            # The touch (every poll_interval under poll_only) carried it.
            assert time.monotonic() - asked < 1.5
            assert cancelled == ["cancelled"]
            row = wait_until(lambda: finished_row(db, schema, long), what="the cancelled job")
            assert row["status"] == "cancelled"
        finally:
            harness.close()


async def test_poll_only_async_worker(
    apq_factory: Callable[..., AsyncPortQueue], db: Db, schema: str
) -> None:
    harness = AsyncHarness(apq_factory(poll_only=True))
    apq = harness.apq
    try:
        reasons: list[str | None] = []

        @apq.handler("bouncer")
        async def handler(job: Any) -> Any:
            if job.data == "long":
                await asyncio.wait_for(job.signal.wait(), 10)
                reasons.append(job.signal.reason)
                return None
            return job.data * 2

        await harness.start(poll_interval=0.2)
        assert await apq.add_job_and_wait(queue="bouncer", data=21, timeout_seconds=5) == 42
        assert backends(db, "portqueue:listener") == []
        long = (await apq.add_job(queue="bouncer", data="long")).job_id
        assert long
        await wait_until_async(lambda: row_where(db, schema, long, "status = 'active'"),
                               what="the long job to be claimed")
        assert (await apq.cancel_job(job_id=long)).outcome is CancelOutcome.SIGNALLED
        await wait_until_async(lambda: reasons, timeout=3, what="the cancel to arrive")
        assert reasons == ["cancelled"]
        row = await wait_until_async(lambda: finished_row(db, schema, long), what="cancelled")
        assert row["status"] == "cancelled"
    finally:
        await harness.close()


def test_listener_is_the_only_extra_connection_and_it_names_itself(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    """Operators (and the fault tests) tell a worker's connections apart by name."""
    pq = harness.pq
    pq.create_queue(queue="named", handler=lambda job: None)
    harness.start()
    assert len(wait_until(lambda: backends(db, "portqueue:listener"), what="listener")) == 1
    assert backends(db, "portqueue:worker"), "the worker's own pool names itself"


def test_claims_run_on_one_session_of_their_own(harness: SyncHarness, db: Db) -> None:
    """No pool checkout per claim, and always the same backend: every claim runs
    on the worker's one fetcher session. A worker that consumes no queue has none."""
    pq = harness.pq
    done: list[int] = []
    pq.create_queue(queue="claims", handler=lambda job: done.append(job.data))
    harness.start(poll_interval=SLOW_POLL)
    (fetcher,) = wait_until(lambda: backends(db, "portqueue:fetcher"), what="the fetcher")
    for n in range(6):
        pq.add_job(queue="claims", data=n)
        wait_until(lambda: len(done) > n, what=f"job {n}")  # noqa: B023
    assert backends(db, "portqueue:fetcher") == [fetcher]
    (query,) = db.execute("SELECT query FROM pg_stat_activity WHERE pid = %s",
                          [fetcher]).fetchone() or (None,)
    # A claim (its text may be cut before SKIP LOCKED by track_activity_query_size), or
    # the once-a-second read of the queues' flow-control limits.
    claims = ("WITH RECURSIVE wanted AS", "WITH mixed AS", "WITH wanted AS",
              "SELECT q.name")
    assert query is not None and query.startswith(claims), "its last statement is a claim"
    harness.close()
    wait_until(lambda: not backends(db, "portqueue:fetcher"), what="the fetcher to close")
    harness.start(queues=[], scheduler=True)
    wait_until(lambda: backends(db, "portqueue:worker"), what="the service-only worker's pool")
    assert backends(db, "portqueue:fetcher") == []


def test_a_batch_add_sends_one_notification(
    pq: PortQueue, pg_dsn: str, schema: str
) -> None:
    """NOTIFY is coalesced per statement and queue, not sent per row."""
    channel = f"{schema}.job"
    with psycopg.connect(pg_dsn, autocommit=True) as listener:
        listener.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(channel)))
        pq.add_jobs(queue="bulk", jobs=[{"data": n} for n in range(50)])
        pq.add_job(queue="other", data={})
        pq.add_job(queue="later", data={}, schedule={"start_after_seconds": 60})  # not ready
        # Notifications arrive in commit order: a sentinel closes the count.
        listener.execute("SELECT pg_notify(%s, 'sentinel')", [channel])
        payloads = []
        for notify in listener.notifies(timeout=5):
            if notify.payload == "sentinel":
                break
            payloads.append(notify.payload)
    assert payloads == ["bulk", "other"]
