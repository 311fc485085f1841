"""SPEC §10, ``portqueue.testing``: assert_enqueued (a subset match on data,
equality on snapshot fields), refute_enqueued and enqueued_jobs, on both
clients."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from portqueue import InvalidArgument, PortQueue
from portqueue.testing import assert_enqueued, enqueued_jobs, refute_enqueued


def test_assert_enqueued_matches_a_subset_of_data_and_fields(pq: PortQueue) -> None:
    @pq.task(queue="emails")
    def send(to: str, template: str = "welcome", meta: dict[str, Any] | None = None) -> None: ...

    first = send.add(to="a@b.com", meta={"tenant": 1, "tags": ["x"]}).job_id
    send.configure(priority=10).add(to="c@d.com")
    found = assert_enqueued(pq, queue="emails", data={"to": "a@b.com", "meta": {"tenant": 1}})
    assert found.job_id == first
    assert assert_enqueued(pq, queue="emails", priority=10).data["to"] == "c@d.com"
    assert_enqueued(pq, queue="emails")
    with pytest.raises(AssertionError, match="2 enqueued"):
        assert_enqueued(pq, queue="emails", data={"to": "nobody"})
    with pytest.raises(AssertionError, match="none is enqueued"):
        assert_enqueued(pq, queue="sms")
    with pytest.raises(AssertionError):
        assert_enqueued(pq, queue="emails", data={"meta": {"tags": ["y"]}})
    with pytest.raises(InvalidArgument) as refused:
        assert_enqueued(pq, queue="emails", priorty=10)
    assert refused.value.argument == "priorty"


def test_refute_enqueued_and_finished_jobs_no_longer_count(pq: PortQueue) -> None:
    pq.create_queue(queue="reports", handler=lambda job: None)
    refute_enqueued(pq, queue="reports")
    pq.add_job(queue="reports", data={"month": 11})
    pq.add_job(queue="reports", data={"month": 12}, schedule={"start_after_seconds": 600})
    refute_enqueued(pq, queue="reports", data={"month": 10})
    with pytest.raises(AssertionError, match="1 job"):
        refute_enqueued(pq, queue="reports", data={"month": 11})
    assert [job.data["month"] for job in enqueued_jobs(pq, queue="reports")] == [11, 12]
    pq.drain()
    assert [job.data["month"] for job in enqueued_jobs(pq, queue="reports")] == [12]
    refute_enqueued(pq, queue="reports", data={"month": 11})


def test_the_helpers_take_an_async_client(apq_factory: Any) -> None:
    async def scenario() -> None:
        async with apq_factory() as apq:
            await apq.add_job(queue="async-emails", data={"to": "a"})
            assert assert_enqueued(apq, queue="async-emails", data={"to": "a"}).queue == (
                "async-emails")
            refute_enqueued(apq, queue="async-emails", data={"to": "b"})
            assert len(enqueued_jobs(apq, queue="async-emails")) == 1

    asyncio.run(scenario())


def test_a_client_is_required() -> None:
    with pytest.raises(InvalidArgument) as refused:
        enqueued_jobs("postgresql://", queue="q")  # type: ignore[arg-type]
    assert refused.value.argument == "pq"
