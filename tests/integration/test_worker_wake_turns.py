"""Issue 22, "50 idle worker processes": the listeners of a queue take turns,
so an add makes one claim, not one per listener (each woken listener used to
claim, all but one finding nothing: that was most of what idle processes
cost a producer). The first listener passes a wake-up it has no free slot for
on to the others, who then claim at once, not at the poll (30 s here) nor at
their safety claim (made longer than the test here). Claims are counted, not
timed."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from portqueue import AsyncPortQueue, PortQueue
from portqueue.worker import listener
from portqueue.worker.fetcher import Fetcher
from portqueue.worker.listener import WAKE_SHARE
from tests.support.activity import listening_for_jobs
from tests.support.waiting import wait_until_async

POLL = 30.0  # longer than any wait below: only a notification starts a job in time
QUEUE = "turns"
ADDS = 6
# For the start-up claims (each worker's first, and the one after LISTEN) to
# be made before the adds, which they could otherwise claim.
SETTLE = 1.0


@pytest.fixture
def claims(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The worker id of every claim of QUEUE, in order; and the other listeners'
    safety claim pushed past the test, so only turns and pass-ons claim."""
    made: list[str] = []
    claim = Fetcher._claim

    async def counted(self: Fetcher, asked: dict[str, int]) -> Any:
        if QUEUE in asked:
            made.append(self._worker_id)
        return await claim(self, asked)

    monkeypatch.setattr(Fetcher, "_claim", counted)
    monkeypatch.setattr(listener, "PASS_SAFETY_SECONDS", 600.0)
    return made


async def start_listeners(apq_factory: Callable[..., AsyncPortQueue], db: Any, schema: str,
                          handle: Callable[[Any], Any], first_concurrency: int,
                          ) -> list[AsyncPortQueue]:
    clients = []
    for n in range(WAKE_SHARE):
        apq = apq_factory(application_name=f"share{n}")
        apq.handler(QUEUE, concurrency=first_concurrency if n == 0 else 2)(handle)
        # The oldest is the first listener; each counted the workers before it.
        await apq.start(poll_interval=POLL, listen_check_seconds=300.0)
        clients.append(apq)
    await wait_until_async(lambda: len(listening_for_jobs(db, schema)) == WAKE_SHARE,
                           10, "every worker's LISTEN")
    return clients


async def stop(clients: list[AsyncPortQueue]) -> None:
    for apq in clients:
        await apq.stop()
        await apq.aclose()


async def test_each_add_makes_one_claim_among_the_listeners(
    apq_factory: Callable[..., AsyncPortQueue], pq: PortQueue, db: Any, schema: str,
    claims: list[str],
) -> None:
    started: list[str] = []

    async def handle(job: Any) -> None:
        started.append(job.id)

    async def started_by_notification(job_id: str | None) -> None:
        await wait_until_async(lambda: job_id in started, 10, "the job to start by notification")

    clients = await start_listeners(apq_factory, db, schema, handle, first_concurrency=4)
    try:
        # A queue none of them consumes: its notification changes nothing here.
        pq.add_job(queue="elsewhere", data={})
        await asyncio.sleep(SETTLE)
        before = len(claims)
        for n in range(ADDS):
            await started_by_notification(pq.add_job(queue=QUEUE, data={"n": n}).job_id)
        await asyncio.sleep(0.5)  # any claim the adds set off has been made
        assert len(claims) - before == ADDS, claims[before:]
        assert len(set(claims[before:])) == 1, "the first listener claims every add"
    finally:
        await stop(clients)


async def test_a_full_first_listener_passes_the_wake_up_on(
    apq_factory: Callable[..., AsyncPortQueue], pq: PortQueue, db: Any, schema: str,
    claims: list[str],
) -> None:
    started: list[str] = []
    release = asyncio.Event()

    async def handle(job: Any) -> None:
        started.append(job.id)
        if job.data.get("hold"):
            await release.wait()

    clients = await start_listeners(apq_factory, db, schema, handle, first_concurrency=1)
    try:
        await asyncio.sleep(SETTLE)
        held = pq.add_job(queue=QUEUE, data={"hold": True})
        await wait_until_async(lambda: held.job_id in started, 10, "the held job to start")
        # The first listener's only slot is taken: the next add is passed on.
        job = pq.add_job(queue=QUEUE, data={})
        await wait_until_async(lambda: job.job_id in started, 10,
                               "the passed-on job to start before the poll")
    finally:
        release.set()
        await stop(clients)


async def test_the_others_claim_when_the_first_listener_is_gone_and_not_yet_counted_out(
    apq_factory: Callable[..., AsyncPortQueue], pq: PortQueue, db: Any, schema: str,
) -> None:
    started: list[str] = []

    async def handle(job: Any) -> None:
        started.append(job.id)

    clients = await start_listeners(apq_factory, db, schema, handle, first_concurrency=2)
    try:
        # The others count their peers again only in 300 s: they still take
        # themselves for the second to fourth listener, and wait for a first
        # one that no longer claims. Their safety claim starts the job.
        await stop(clients[:1])
        job = pq.add_job(queue=QUEUE, data={})
        await wait_until_async(lambda: job.job_id in started, 10,
                               "the job to start by the others' safety claim, not the poll")
    finally:
        await stop(clients[1:])
