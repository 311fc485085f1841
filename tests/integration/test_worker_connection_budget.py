"""Issue 23, "Many processes": a worker holds at most ``connections`` (default
3) connections of its own, whatever its load and services: the listener, the
claim session (claims and heartbeats), and a pool of the rest. Counted from
pg_stat_activity by the worker client's application_name prefix, sampled
throughout a drain with maintenance on (its services share the pool)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from portqueue import AsyncPortQueue, InvalidArgument, PortQueue
from tests.support.waiting import wait_until_async

Db = psycopg.Connection[Any]
JOBS = 300


def roles(db: Db, prefix: str) -> Counter[str]:
    rows = db.execute("SELECT application_name FROM pg_stat_activity "
                      "WHERE datname = current_database() AND application_name LIKE %s",
                      [f"{prefix}:%"]).fetchall()
    return Counter(row[0].rsplit(":", 1)[-1] for row in rows)


async def drain_sampling(apq: AsyncPortQueue, pq: PortQueue, db: Db, prefix: str,
                         **start: Any) -> list[Counter[str]]:
    """Start the worker, add JOBS (on another client), and sample its
    connections until every job has completed."""
    done: list[str] = []

    @apq.handler("budget", concurrency=20, lease_seconds=1)
    async def handler(job: Any) -> None:
        await asyncio.sleep(0.002)
        done.append(job.id)

    samples: list[Counter[str]] = []
    await apq.start(poll_interval=0.2, **start)
    try:
        pq.add_jobs(queue="budget", jobs=[{"data": {"n": n}} for n in range(JOBS)])

        def sampled() -> bool:
            samples.append(roles(db, prefix))
            return len(done) >= JOBS

        await wait_until_async(sampled, 60, f"{JOBS} jobs to run", interval=0.01)
        # A heartbeat or two (a third of the 1 s lease) and the maintenance
        # passes after the drain.
        deadline = asyncio.get_running_loop().time() + 1.0
        while asyncio.get_running_loop().time() < deadline:
            samples.append(roles(db, prefix))
            await asyncio.sleep(0.02)
    finally:
        await apq.stop()
        await apq.aclose()
    return samples


async def test_a_worker_holds_three_connections_by_default(
    apq_factory: Callable[..., AsyncPortQueue], pq: PortQueue, db: Db,
) -> None:
    apq = apq_factory(application_name="budget3")
    samples = await drain_sampling(apq, pq, db, "budget3", maintenance=True, scheduler=True)
    most = max(sum(sample.values()) for sample in samples)
    assert most <= 3, f"up to {most} connections: {max(samples, key=lambda s: sum(s.values()))}"
    seen = set().union(*samples)
    assert seen == {"fetcher", "listener", "worker"}, seen


async def test_poll_only_gives_the_listeners_share_to_the_pool(
    apq_factory: Callable[..., AsyncPortQueue], pq: PortQueue, db: Db,
) -> None:
    apq = apq_factory(application_name="budgetpoll", poll_only=True)
    samples = await drain_sampling(apq, pq, db, "budgetpoll")
    assert max(sum(sample.values()) for sample in samples) <= 3
    assert max(sample["worker"] for sample in samples) <= 2
    assert all(sample["listener"] == 0 for sample in samples)


async def test_more_connections_widen_the_pool_only(
    apq_factory: Callable[..., AsyncPortQueue], pq: PortQueue, db: Db,
) -> None:
    apq = apq_factory(application_name="budget5")
    samples = await drain_sampling(apq, pq, db, "budget5", connections=5)
    assert max(sum(sample.values()) for sample in samples) <= 5
    assert max(sample["worker"] for sample in samples) <= 3
    assert max(sample["fetcher"] for sample in samples) == 1
    assert max(sample["listener"] for sample in samples) == 1


@pytest.mark.parametrize("connections", [2, 0, -1, 1001, 2.5, "3", True])
async def test_a_budget_below_three_or_not_an_integer_is_refused(
    apq_factory: Callable[..., AsyncPortQueue], db: Db, connections: object,
) -> None:
    apq = apq_factory(application_name="budgetbad")

    @apq.handler("budget")
    async def handler(job: Any) -> None:
        pass

    with pytest.raises(InvalidArgument) as refused:
        await apq.start(connections=connections)  # type: ignore[arg-type]
    assert refused.value.argument == "connections"
    assert isinstance(refused.value, ValueError)
    assert roles(db, "budgetbad") == Counter(), "a refused start opened connections"
    assert db.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE "
                      "'budgetbad:%'").fetchone() == (0,)
    await apq.aclose()
