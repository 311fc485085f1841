"""Testing your own handlers and producers against a real PostgreSQL.

``assert_enqueued(pq, queue=..., data=None, **fields)`` returns the job your
code enqueued (pending, delayed included) whose ``data`` contains ``data``
(a subset match: every key given, recursively, with equal values) and whose
``JobSnapshot`` fields equal ``fields`` (``priority=10``, ``group_id=...``);
it fails with the queue's enqueued jobs listed. ``refute_enqueued`` is its
opposite, and ``enqueued_jobs(pq, queue=...)`` lists them, oldest first.
Run the jobs with ``pq.drain()``. The fixtures are in
``portqueue.testing.pytest_plugin`` (``pytest_plugins = [...]``).

Each helper takes a ``PortQueue`` or an ``AsyncPortQueue``; for the latter it
reads on a short blocking connection of its own (a test, not a server: the
wait is a few milliseconds), so it is called without ``await``. It sees
committed jobs only: not those of a transaction still open elsewhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from portqueue.async_client import AsyncPortQueue
from portqueue.client import PortQueue
from portqueue.errors import InvalidArgument
from portqueue.types import JobSnapshot, JobStatus

__all__ = ["assert_enqueued", "enqueued_jobs", "refute_enqueued"]

# get_jobs' largest page.
_PAGE = 500
# How many enqueued jobs a failed assertion lists.
_SHOWN = 10


def enqueued_jobs(pq: PortQueue | AsyncPortQueue, *, queue: str) -> list[JobSnapshot]:
    """Every pending job of ``queue`` (delayed ones included), oldest first."""
    if isinstance(pq, AsyncPortQueue):
        with PortQueue(pq.dsn, schema=pq.schema, pool_max_size=1) as reader:
            return enqueued_jobs(reader, queue=queue)
    if not isinstance(pq, PortQueue):
        raise InvalidArgument("pq", f"must be a PortQueue or an AsyncPortQueue, got {pq!r}")
    jobs: list[JobSnapshot] = []
    while True:
        page = pq.get_jobs(queue=queue, statuses=[JobStatus.PENDING], limit=_PAGE,
                           offset=len(jobs))
        jobs.extend(page.items)
        if not page.items or len(jobs) >= page.total:
            return jobs[::-1]


def assert_enqueued(pq: PortQueue | AsyncPortQueue, *, queue: str, data: Any = None,
                    **fields: Any) -> JobSnapshot:
    """The first enqueued job of ``queue`` that matches; ``AssertionError`` if none does."""
    jobs = enqueued_jobs(pq, queue=queue)
    matching = _matching(jobs, data, fields)
    if not matching:
        raise AssertionError(f"no job enqueued on {queue!r} matches "
                             f"{_describe(data, fields)}; {_listing(jobs)}")
    return matching[0]


def refute_enqueued(pq: PortQueue | AsyncPortQueue, *, queue: str, data: Any = None,
                    **fields: Any) -> None:
    """``AssertionError`` if a job enqueued on ``queue`` matches (all arguments as
    for ``assert_enqueued``: with neither ``data`` nor ``fields``, any job)."""
    jobs = enqueued_jobs(pq, queue=queue)
    matching = _matching(jobs, data, fields)
    if matching:
        raise AssertionError(f"{len(matching)} job(s) enqueued on {queue!r} match "
                             f"{_describe(data, fields)}; {_listing(matching)}")


def _matching(jobs: list[JobSnapshot], data: Any, fields: Mapping[str, Any]) -> list[JobSnapshot]:
    for name in fields:
        if name not in JobSnapshot.__dataclass_fields__ or name == "data":
            raise InvalidArgument(name, "is not a JobSnapshot field")
    return [job for job in jobs
            if (data is None or contains(job.data, data))
            and all(getattr(job, name) == value for name, value in fields.items())]


def contains(actual: Any, expected: Any) -> bool:
    """Whether ``expected`` is a subset of ``actual``: dicts by key, recursively;
    anything else by equality."""
    if isinstance(expected, Mapping):
        return isinstance(actual, Mapping) and all(
            key in actual and contains(actual[key], value) for key, value in expected.items())
    return bool(actual == expected)


def _describe(data: Any, fields: Mapping[str, Any]) -> str:
    parts = [] if data is None else [f"data containing {data!r}"]
    parts += [f"{name}={value!r}" for name, value in fields.items()]
    return ", ".join(parts) or "anything"


def _listing(jobs: list[JobSnapshot]) -> str:
    if not jobs:
        return "none is enqueued there"
    shown = "\n".join(f"  {job.job_id} priority={job.priority} data={job.data!r}"
                      for job in jobs[:_SHOWN])
    more = f"\n  ... and {len(jobs) - _SHOWN} more" if len(jobs) > _SHOWN else ""
    return f"{len(jobs)} enqueued:\n{shown}{more}"
