"""SPEC §4, handlers and queues: registration, queue defaults persisted at start
and applied by producers elsewhere, queues without a handler left alone.

End to end on real PostgreSQL: a producer adds, the worker claims and runs the
handler, the row is read back with SQL."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from portqueue import AsyncPortQueue, PortQueue
from tests.support.rows import count_rows, fetch_one, job_row, queue_row
from tests.support.waiting import wait_until, wait_until_async
from tests.support.workers import AsyncHarness, SyncHarness, finished_row, status

Db = psycopg.Connection[Any]


def test_decorator_and_create_queue_register_sync_handlers(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    pq = harness.pq

    @pq.handler("decorated")
    def decorated(job: Any) -> Any:
        return {"via": "decorator", "n": job.data["n"]}

    def plain(job: Any) -> Any:
        return {"via": "create_queue", "n": job.data["n"]}

    pq.create_queue(queue="plain", handler=plain)
    assert decorated.__name__ == "decorated", "the decorator returns the function itself"
    first = pq.add_job(queue="decorated", data={"n": 1}).job_id
    second = pq.add_job(queue="plain", data={"n": 2}).job_id
    assert first and second
    harness.start()

    done = wait_until(lambda: finished_row(db, schema, first), what="the decorated job")
    assert done["status"] == "completed" and done["output"] == {"via": "decorator", "n": 1}
    done = wait_until(lambda: finished_row(db, schema, second), what="the create_queue job")
    assert done["status"] == "completed" and done["output"] == {"via": "create_queue", "n": 2}


async def test_decorator_and_create_queue_register_async_handlers(
    aharness: AsyncHarness, db: Db, schema: str
) -> None:
    apq = aharness.apq

    @apq.handler("decorated")
    async def decorated(job: Any) -> Any:
        return {"via": "decorator", "n": job.data["n"]}

    async def plain(job: Any) -> Any:
        return {"via": "create_queue", "n": job.data["n"]}

    apq.create_queue(queue="plain", handler=plain)
    first = (await apq.add_job(queue="decorated", data={"n": 1})).job_id
    second = (await apq.add_job(queue="plain", data={"n": 2})).job_id
    assert first and second
    await aharness.start()

    done = await wait_until_async(lambda: finished_row(db, schema, first), what="decorated job")
    assert done["status"] == "completed" and done["output"] == {"via": "decorator", "n": 1}
    done = await wait_until_async(lambda: finished_row(db, schema, second), what="plain job")
    assert done["status"] == "completed" and done["output"] == {"via": "create_queue", "n": 2}


def test_sync_and_async_handlers_share_one_sync_client(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    """The runtime is one implementation: PortQueue runs an async def handler too."""
    pq = harness.pq

    @pq.handler("coroutine")
    async def coroutine(job: Any) -> Any:
        return {"async": True}

    job_id = pq.add_job(queue="coroutine", data={}).job_id
    assert job_id
    harness.start()
    done = wait_until(lambda: finished_row(db, schema, job_id), what="the async handler's job")
    assert done["status"] == "completed" and done["output"] == {"async": True}


def test_registration_does_no_io_and_start_writes_queue_defaults(
    harness: SyncHarness, pg_dsn: str, db: Db, schema: str
) -> None:
    pq = harness.pq
    pq.create_queue(
        queue="emails", handler=lambda job: None, concurrency=4,
        retry={"max_attempts": 5, "delay_seconds": 7,
               "backoff": {"strategy": "exponential", "factor": 3, "max_delay_seconds": 90,
                           "jitter": True}},
        retention={"ttl_seconds": 3600, "keep_completed": 10, "keep_failed": 20},
        expire_in_seconds=600, timeout_seconds=30, lease_seconds=9,
        dead_letter_queue="emails-dead",
    )
    assert queue_row(db, schema, "emails") is None, "registration is a plain call, no I/O"

    harness.start()
    row = queue_row(db, schema, "emails")
    assert row is not None, "start() wrote the queue's row"
    assert {key: row[key] for key in (
        "concurrency", "max_attempts", "retry_delay_seconds", "backoff_strategy",
        "backoff_factor", "backoff_max_delay_seconds", "backoff_jitter", "expire_in_seconds",
        "retention_ttl_seconds", "retention_keep_completed", "retention_keep_failed",
        "timeout_seconds", "lease_seconds", "dead_letter_queue")} == {
        "concurrency": 4, "max_attempts": 5, "retry_delay_seconds": 7,
        "backoff_strategy": "exponential", "backoff_factor": 3.0,
        "backoff_max_delay_seconds": 90, "backoff_jitter": True, "expire_in_seconds": 600,
        "retention_ttl_seconds": 3600, "retention_keep_completed": 10,
        "retention_keep_failed": 20, "timeout_seconds": 30, "lease_seconds": 9,
        "dead_letter_queue": "emails-dead",
    }
    # The worker leaves; a producer elsewhere, with no handler and no options,
    # still gets the queue's defaults from the table.
    pq.stop()
    with PortQueue(pg_dsn, schema=schema) as producer:
        job_id = producer.add_job(queue="emails", data={"to": "a@b.c"}).job_id
    assert job_id
    job = job_row(db, schema, job_id)
    assert job["status"] == "pending"
    assert (job["max_attempts"], job["retry_delay_seconds"], job["backoff_strategy"],
            job["backoff_factor"], job["backoff_max_delay_seconds"], job["backoff_jitter"]) == (
        5, 7, "exponential", 3.0, 90, True)
    assert job["expire_in_seconds"] == 600 and job["timeout_seconds"] == 30
    assert job["expire_at"] is not None
    assert abs((job["expire_at"] - job["start_after"]).total_seconds() - 600) < 1


async def test_async_start_writes_queue_defaults(
    aharness: AsyncHarness, db: Db, schema: str
) -> None:
    apq = aharness.apq

    @apq.handler("reports", concurrency=2, retry={"max_attempts": 3, "delay_seconds": 11},
                 timeout_seconds=45, lease_seconds=12)
    async def reports(job: Any) -> None:
        return None

    assert queue_row(db, schema, "reports") is None, "registration is a plain call, no I/O"
    await aharness.start()
    row = queue_row(db, schema, "reports")
    assert row is not None
    assert (row["concurrency"], row["max_attempts"], row["retry_delay_seconds"],
            row["timeout_seconds"], row["lease_seconds"]) == (2, 3, 11, 45, 12)
    await apq.stop()
    job_id = (await apq.add_job(queue="reports", data={})).job_id
    assert job_id
    job = job_row(db, schema, job_id)
    assert (job["max_attempts"], job["retry_delay_seconds"], job["timeout_seconds"]) == (
        3, 11, 45)


def test_a_queue_without_a_handler_here_is_never_claimed(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    pq = harness.pq

    @pq.handler("mine")
    def mine(job: Any) -> str:
        return "done"

    other = pq.add_job(queue="not-mine", data={}).job_id
    assert other
    harness.start(poll_interval=0.05)
    # Jobs on the handled queue, added after the other one, run: the worker
    # has claimed (and polled) many times meanwhile.
    for _ in range(5):
        job_id = pq.add_job(queue="mine", data={}).job_id
        assert job_id
        wait_until(lambda: finished_row(db, schema, job_id),  # noqa: B023
                   what="a job on the handled queue")
    row = job_row(db, schema, other)
    assert row["status"] == "pending" and row["attempt"] == 0 and row["started_at"] is None
    assert status(db, schema, other) == "pending"


def test_start_with_queues_claims_only_those(harness: SyncHarness, db: Db, schema: str) -> None:
    pq = harness.pq
    pq.create_queue(queue="left", handler=lambda job: "left")
    pq.create_queue(queue="right", handler=lambda job: "right")
    skipped = pq.add_job(queue="right", data={}).job_id
    assert skipped
    harness.start(queues=["left"], poll_interval=0.05)
    for _ in range(3):
        job_id = pq.add_job(queue="left", data={}).job_id
        assert job_id
        wait_until(lambda: finished_row(db, schema, job_id),  # noqa: B023
                   what="a job on the started queue")
    assert status(db, schema, skipped) == "pending"


def test_duplicate_registration_is_a_value_error(pq: PortQueue) -> None:
    pq.create_queue(queue="emails", handler=lambda job: None)
    with pytest.raises(ValueError, match="emails"):
        pq.create_queue(queue="emails", handler=lambda job: None)
    with pytest.raises(ValueError, match="emails"):
        pq.handler("emails")(lambda job: None)


async def test_duplicate_registration_is_a_value_error_async(
    apq_factory: Callable[..., AsyncPortQueue],
) -> None:
    async with apq_factory() as apq:

        @apq.handler("emails")
        async def first(job: Any) -> None:
            return None

        with pytest.raises(ValueError, match="emails"):
            apq.create_queue(queue="emails", handler=first)


async def test_a_sync_handler_runs_on_the_async_client(
    aharness: AsyncHarness, db: Db, schema: str
) -> None:
    apq = aharness.apq

    @apq.handler("threaded")
    def threaded(job: Any) -> Any:  # a plain def: run in a worker thread
        return {"sync": job.data}

    await aharness.start()
    assert await apq.add_job_and_wait(queue="threaded", data=5, timeout_seconds=5) == {"sync": 5}


def test_a_running_worker_is_registered_until_it_stops(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    pq = harness.pq
    pq.create_queue(queue="a", handler=lambda job: None, concurrency=3)
    pq.create_queue(queue="b", handler=lambda job: None, concurrency=2)
    harness.start()
    row = fetch_one(db, schema, "worker", "true")
    assert row is not None
    assert row["instance_key"] == "test-host-ram-8gb" and sorted(row["queues"]) == ["a", "b"]
    assert row["concurrency"] == 5 and row["pid"] > 0 and row["hostname"]
    pq.stop()
    assert count_rows(db, schema, "worker") == 0


def test_start_rejects_what_it_cannot_run(harness: SyncHarness) -> None:
    pq = harness.pq
    with pytest.raises(ValueError, match="queues"):
        pq.start()  # nothing registered
    pq.create_queue(queue="known", handler=lambda job: None)
    with pytest.raises(ValueError, match="queues"):
        pq.start(queues=["unknown"])
    with pytest.raises(ValueError, match="concurrency"):
        pq.start(concurrency=0)
    with pytest.raises(ValueError, match="poll_interval"):
        pq.start(poll_interval=0)
    with pytest.raises(ValueError, match="listen_check_seconds"):
        pq.start(listen_check_seconds=0)
    harness.start()
    with pytest.raises(ValueError, match="already running"):
        pq.start()
