"""A handler's declared options apply to the jobs its client adds from the first
job on, whether or not a worker has started (issue 18, item 1), and what a
producer without the handler gets (docs/consuming.md, "Producers without the
handler").

End to end: the client adds before any worker runs, then a real worker runs
the handler, and the row says how many attempts the job had."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import psycopg
import pytest

from portqueue import AsyncPortQueue, PortQueue
from tests.support.rows import fetch_one, job_row
from tests.support.waiting import wait_until, wait_until_async
from tests.support.workers import AsyncHarness, SyncHarness, finished_row

Db = psycopg.Connection[Any]


class Boom(Exception):
    pass


def always_fails(job: Any) -> None:
    raise Boom(f"attempt {job.attempt}")


def test_jobs_added_before_the_worker_starts_get_the_declared_retry(
    pq: PortQueue, harness: SyncHarness, db: Db, schema: str
) -> None:
    pq.handler("emails", retry={"max_attempts": 2}, timeout_seconds=30,
               expire_in_seconds=3600)(always_fails)
    first = pq.add_job(queue="emails", data={"n": 1})
    batch = pq.add_jobs(queue="emails", jobs=[{"data": {"n": 2}}, {"data": {"n": 3}}])
    own = pq.add_job(queue="emails", data={"n": 4}, retry={"max_attempts": 3})
    ids = [first.job_id, *(r.job_id for r in batch)]
    assert all(job_id is not None for job_id in ids)
    for job_id in ids:
        row = job_row(db, schema, str(job_id))
        assert (row["max_attempts"], row["timeout_seconds"], row["expire_in_seconds"]) == (
            2, 30, 3600)
    assert job_row(db, schema, str(own.job_id))["max_attempts"] == 3  # the job's own wins

    harness.start()
    for job_id in ids:
        row = wait_until(partial(finished_row, db, schema, str(job_id)),
                         timeout=20, what=f"job {job_id} to fail for good")
        assert (row["status"], row["attempt"], len(row["errors"])) == ("failed", 2, 2)


async def test_async_client_applies_the_declaration_before_its_worker_starts(
    apq_factory: Callable[..., AsyncPortQueue], db: Db, schema: str
) -> None:
    harness = AsyncHarness(apq_factory())
    try:
        apq = harness.apq
        apq.handler("emails", retry={"max_attempts": 2})(always_fails)
        added = await apq.add_job(queue="emails", data={})
        assert job_row(db, schema, str(added.job_id))["max_attempts"] == 2
        await harness.start()
        row = await wait_until_async(lambda: finished_row(db, schema, str(added.job_id)),
                                     timeout=20, what="the job to fail for good")
        assert (row["status"], row["attempt"]) == ("failed", 2)
    finally:
        await harness.close()


def test_a_recurring_add_templates_the_declared_options(
    pq: PortQueue, db: Db, schema: str
) -> None:
    pq.handler("reports", retry={"max_attempts": 4})(always_fails)
    added = pq.add_job(queue="reports", data={}, schedule={"start_every_seconds": 60})
    row = fetch_one(db, schema, "schedule", "id = %s", [added.schedule_id])
    assert row is not None and row["job_options"]["max_attempts"] == 4


def test_a_producer_without_the_handler_gets_the_stored_defaults(
    pq: PortQueue, pg_dsn: str, harness: SyncHarness, db: Db, schema: str
) -> None:
    with PortQueue(pg_dsn, schema=schema) as producer:
        # Nothing has declared the queue yet: the built-in single attempt.
        before = producer.add_job(queue="emails", data={})
        assert job_row(db, schema, str(before.job_id))["max_attempts"] == 1
        # A worker's start stores its declaration in the queue row, which
        # every producer's adds read from then on.
        pq.handler("emails", retry={"max_attempts": 2})(always_fails)
        harness.start()
        after = producer.add_job(queue="emails", data={})
        assert job_row(db, schema, str(after.job_id))["max_attempts"] == 2


@pytest.mark.parametrize("retry", [None, {"max_attempts": 1}])
def test_a_queue_without_a_declaration_is_untouched(
    pq: PortQueue, db: Db, schema: str, retry: dict[str, int] | None
) -> None:
    # Another queue's declaration says nothing about this one.
    pq.handler("emails", retry={"max_attempts": 5})(always_fails)
    added = pq.add_job(queue="other", data={}, retry=retry)
    assert job_row(db, schema, str(added.job_id))["max_attempts"] == 1
