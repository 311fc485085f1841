"""Issue 22, "50 idle worker processes": only the WAKE_SHARE oldest live
workers of a queue LISTEN for its jobs (every NOTIFY used to wake every
process and make each claim); when they stop, the next oldest take over at
their next health check, so a job added is still started by a notification,
not by the poll (30 s here)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg

from portqueue import AsyncPortQueue, PortQueue
from portqueue.worker.listener import WAKE_SHARE
from tests.support.activity import listening_for_jobs
from tests.support.waiting import wait_until_async

Db = psycopg.Connection[Any]
WORKERS = WAKE_SHARE + 2
POLL = 30.0  # longer than any wait below: only a notification starts a job in time
CHECK = 0.5  # the listeners' health check, when they count their peers again


async def test_only_the_oldest_workers_listen_and_the_next_take_over(
    apq_factory: Callable[..., AsyncPortQueue], pq: PortQueue, db: Db, schema: str,
) -> None:
    started: list[str] = []
    clients = []

    async def started_by_notification(job_id: str | None) -> None:
        await wait_until_async(lambda: job_id in started, 10,
                               "a job to start by notification after the listeners left")

    try:
        for n in range(WORKERS):
            apq = apq_factory(application_name=f"share{n}")

            @apq.handler("share", concurrency=2)
            async def handler(job: Any) -> None:
                started.append(job.id)

            # The newest check often, so they take over soon; the oldest
            # never, so their LISTEN stays their last statement to look at.
            check = 300.0 if n < WAKE_SHARE else CHECK
            await apq.start(poll_interval=POLL, listen_check_seconds=check)
            clients.append(apq)
        # Each counted the workers before it: the first WAKE_SHARE listen.
        listeners = await wait_until_async(
            lambda: len(listening_for_jobs(db, schema)) == WAKE_SHARE
            and listening_for_jobs(db, schema), 10, "the first workers' LISTEN")
        assert listeners == [f"share{n}:listener" for n in range(WAKE_SHARE)]
        job = pq.add_job(queue="share", data={})
        await wait_until_async(lambda: job.job_id in started, 10, "the job to start")

        # The listeners stop; the others find themselves among the oldest at
        # their next health check, and listen.
        for apq in clients[:WAKE_SHARE]:
            await apq.stop()
            await apq.aclose()
        for _ in range(3):
            await started_by_notification(pq.add_job(queue="share", data={}).job_id)
    finally:
        for apq in clients:
            await apq.stop()
            await apq.aclose()
