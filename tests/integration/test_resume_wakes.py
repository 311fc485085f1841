"""A resumed queue's pending jobs start at once, not at each worker's next
poll: the resume notifies the queue's workers as an add does (issue 23's
processes bench resumes a queue of 5,000 jobs; every process waited for its
poll, up to a second, before claiming any)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from portqueue import AsyncPortQueue, PortQueue
from tests.pgbouncer import mode
from tests.support.activity import listening_for_jobs
from tests.support.waiting import wait_until_async

POLL = 60.0  # longer than any wait below: only a notification starts the jobs in time


async def test_resuming_a_queue_wakes_its_workers(
    apq_factory: Callable[..., AsyncPortQueue], pq: PortQueue,
    db: psycopg.Connection[Any], schema: str,
) -> None:
    started: list[str] = []
    apq = apq_factory(application_name="share-resume")

    @apq.handler("resumed", concurrency=5)
    async def handler(job: Any) -> None:
        started.append(job.id)

    @apq.handler("probe")
    async def probe(job: Any) -> None:
        started.append(job.id)

    if mode.poll_only():
        pytest.skip("poll_only workers hear no notification: a resume reaches them at their poll")
    pq.pause_queue(queue="resumed")
    ids = [job.job_id for job in pq.add_jobs(queue="resumed",
                                             jobs=[{"data": {"n": n}} for n in range(3)])]
    await apq.start(poll_interval=POLL)
    try:
        # Once it listens, a probe's start says that the claims of every
        # queue the worker makes at start (and once LISTEN is in) are done:
        # they found the queue paused, and nothing claims it until the poll.
        await wait_until_async(lambda: listening_for_jobs(db, schema), 10, "LISTEN")
        probe_id = pq.add_job(queue="probe", data={}).job_id
        await wait_until_async(lambda: probe_id in started, 10, "the probe")
        started.remove(probe_id)
        assert started == []
        info = pq.resume_queue(queue="resumed")
        assert info.queue == "resumed" and info.paused is None
        await wait_until_async(lambda: sorted(started) == sorted(ids), 10,
                               "the resumed queue's jobs to start")
    finally:
        await apq.stop()
        await apq.aclose()
