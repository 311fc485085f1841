"""The async shell against the sync one, one test per public method.

Behaviour tests run on ``PortQueue`` only (the ``client`` fixture): both
clients drive the same sans-IO operations, and tests/unit/test_generated.py
proves ``portqueue/client.py`` is the generated twin of
``portqueue/async_client.py``. What is left to prove is the async shell's own
I/O: each method reaches the database (what one client writes, the other
reads) and returns the same type as the sync one.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

from portqueue import AsyncPortQueue, PortQueue
from portqueue.types import Page
from tests.support.clients import BlockingAsyncClient

Scenario = Callable[[Any, str], Any]


def _added(client: Any, queue: str) -> str:
    job_id = client.add_job(queue=queue, data={"queue": queue}).job_id
    assert job_id is not None
    return str(job_id)


def _cancelled(client: Any, queue: str) -> str:
    job_id = _added(client, queue)
    client.cancel_job(job_id=job_id)
    return job_id


def _schedule(client: Any, queue: str) -> str:
    schedule_id = client.add_job(queue=queue, data=1,
                                 schedule={"start_every_seconds": 60}).schedule_id
    assert schedule_id is not None
    return str(schedule_id)


def _fetched(client: Any, queue: str) -> Any:
    _added(client, queue)
    (job,) = client.fetch_jobs(queue=queue, limit=5)
    return job


def _settled(client: Any, queue: str, write: str) -> bool:
    # A pull consumer's write on the job it fetched: both shells return True.
    job = _fetched(client, queue)
    lease = {"job_id": job.job_id, "lease_token": job.lease_token}
    if write == "complete_job":
        return bool(client.complete_job(**lease, output={"done": True}))
    if write == "fail_job":
        return bool(client.fail_job(**lease, error="boom", retry=False))
    return bool(client.extend_lease(**lease, lease_seconds=120))


def _add_and_wait(client: Any, queue: str) -> type[BaseException]:
    # No worker runs here: both shells must add the job, wait and time out.
    with pytest.raises(TimeoutError) as info:
        client.add_job_and_wait(queue=queue, data=1, timeout_seconds=0.2)
    assert client.get_jobs(queue=queue).total == 1
    return info.type


# Each builds its own rows on ``queue`` with the client under test and returns
# the method's result.
SCENARIOS: dict[str, Scenario] = {
    "migrate": lambda c, q: c.migrate(),
    "add_job": lambda c, q: c.add_job(queue=q, data={"n": 1}),
    "add_jobs": lambda c, q: c.add_jobs(queue=q, jobs=[{"data": 1}, {"data": 2}]),
    "retry_job": lambda c, q: c.retry_job(job_id=_cancelled(c, q)),
    "cancel_job": lambda c, q: c.cancel_job(job_id=_added(c, q)),
    "remove_job": lambda c, q: c.remove_job(job_id=_added(c, q)),
    "remove_jobs": lambda c, q: c.remove_jobs(job_ids=[_added(c, q)]),
    "remove_schedule": lambda c, q: c.remove_schedule(schedule_id=_schedule(c, q)),
    "pause_queue": lambda c, q: (_added(c, q), c.pause_queue(queue=q))[1],
    "resume_queue": lambda c, q: (c.pause_queue(queue=q), c.resume_queue(queue=q))[1],
    "get_job": lambda c, q: c.get_job(job_id=_added(c, q)),
    "get_jobs": lambda c, q: (_added(c, q), c.get_jobs(queue=q))[1],
    "get_queue_stats": lambda c, q: (_added(c, q), c.get_queue_stats(queue=q))[1],
    "get_queues": lambda c, q: (_added(c, q), c.get_queues())[1],
    "get_queue": lambda c, q: (_added(c, q), c.get_queue(queue=q))[1],
    "remove_queue": lambda c, q: (_added(c, q), _cancelled(c, f"{q}-gone"),
                                  c.remove_queue(queue=f"{q}-gone"))[2],
    "get_schedules": lambda c, q: (_schedule(c, q), c.get_schedules(queue=q))[1],
    "wait_for_job": lambda c, q: c.wait_for_job(job_id=_cancelled(c, q), timeout_seconds=5),
    "add_job_and_wait": _add_and_wait,
    "fetch_jobs": lambda c, q: (_added(c, q), c.fetch_jobs(queue=q))[1],
    "complete_job": lambda c, q: _settled(c, q, "complete_job"),
    "fail_job": lambda c, q: _settled(c, q, "fail_job"),
    "extend_lease": lambda c, q: _settled(c, q, "extend_lease"),
    "retry_jobs": lambda c, q: c.retry_jobs(job_ids=[_cancelled(c, q)]),
    "cancel_jobs": lambda c, q: c.cancel_jobs(queue=(_added(c, q), q)[1], statuses=["pending"]),
    "redrive": lambda c, q: (_added(c, q), c.redrive(queue=q))[1],
    "drain": lambda c, q: (c.create_queue(queue=q, handler=lambda job: None), _added(c, q),
                           c.drain(queues=[q]))[2],
    "set_queue_limits": lambda c, q: c.set_queue_limits(
        queue=q, global_concurrency=3, rate_limit={"limit": 10, "period_seconds": 60}),
    # Workflows (SPEC §9): behaviour in tests/integration/test_workflow_*.py.
    "add_flow": lambda c, q: c.add_flow(jobs=[{"key": "a", "queue": q, "data": 1},
                                              {"key": "b", "queue": q, "data": 2,
                                               "depends_on": ["a"]}]),
    "get_flow": lambda c, q: c.get_flow(
        flow_id=c.add_flow(jobs=[{"key": "a", "queue": q, "data": 1}]).flow_id),
    "subscribe": lambda c, q: c.subscribe(topic=f"{q}-topic", queue=q),
    "unsubscribe": lambda c, q: (c.subscribe(topic=f"{q}-topic", queue=q),
                                 c.unsubscribe(topic=f"{q}-topic", queue=q))[1],
    "publish": lambda c, q: (c.subscribe(topic=f"{q}-topic", queue=q),
                             c.publish(topic=f"{q}-topic", data={"n": 1}))[1],
}
# Public coroutine methods tested elsewhere on both clients: the worker's
# lifecycle (tests/integration/test_worker_*.py, ``harness`` and ``aharness``)
# and closing (every fixture).
ELSEWHERE = {"start", "stop", "run", "aclose"}


def _shape(value: Any) -> Any:
    """A result's type, and its items' types (a list's, a page's)."""
    if isinstance(value, list):
        return (list, [_shape(item) for item in value])
    if isinstance(value, Page):
        return (Page, {_shape(item) for item in value.items})
    return value if isinstance(value, type) else type(value)


def test_every_public_method_has_a_parity_test() -> None:
    coroutines = {name for name, member in inspect.getmembers(AsyncPortQueue)
                  if inspect.iscoroutinefunction(member) and not name.startswith("_")}
    assert coroutines - ELSEWHERE == set(SCENARIOS)


@pytest.mark.parametrize("method", list(SCENARIOS))
def test_the_async_client_reaches_the_database_and_returns_the_sync_type(
    method: str, pq: PortQueue, aclient: BlockingAsyncClient
) -> None:
    scenario = SCENARIOS[method]
    expected = scenario(pq, f"sync-{method}")
    got = scenario(aclient, f"async-{method}")
    assert _shape(got) == _shape(expected)
    # What the async client wrote, the sync one reads (and the other way round).
    if method != "migrate":
        for name in ("sync", "async"):
            assert pq.get_queue_stats(queue=f"{name}-{method}").queue == f"{name}-{method}"
        async_counts = aclient.get_queue_stats(queue=f"async-{method}").counts
        assert async_counts == pq.get_queue_stats(queue=f"async-{method}").counts
    assert isinstance(aclient.inner, AsyncPortQueue)
