"""Fixtures for the dashboard tests: the app on the test database behind an
HTTP client (in process), and jobs that really failed in a real worker."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from portqueue import AsyncPortQueue, JobSnapshot, JobStatus, PortQueue
from portqueue.dashboard import create_app

# Re-exported: the dashboard tests import the credentials from here.
from tests.dashboard.accounts import PASSWORD as PASSWORD
from tests.dashboard.accounts import TOKEN as TOKEN
from tests.dashboard.accounts import USER as USER
from tests.dashboard.browser import (  # noqa: F401 (the browser tests' fixtures)
    browser,
    dashboard_url,
    page,
    page_without_csp,
)

BASE_URL = "http://localhost"  # a Host the dashboard serves

_CSRF_RE = re.compile(r'name="csrf_token" value="([0-9a-f]+)"')


def csrf_token(html: str) -> str:
    """The CSRF token a rendered page put in its forms."""
    match = _CSRF_RE.search(html)
    assert match is not None, "no form with a csrf_token on this page"
    return match.group(1)


def job_ids_listed(html: str) -> list[str]:
    return re.findall(r'<tr data-job-id="([0-9a-f-]+)">', html)


@pytest.fixture
async def apq(apq_factory: Callable[..., AsyncPortQueue]) -> AsyncIterator[AsyncPortQueue]:
    client = apq_factory()
    yield client
    await client.aclose()


def http_client(app: Any, **options: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url=BASE_URL, **options)


@pytest.fixture
def dashboard_app(apq: AsyncPortQueue) -> Any:
    """The dashboard with Basic auth, on the test schema."""
    return create_app(apq, auth=f"{USER}:{PASSWORD}")


@pytest.fixture
async def dashboard(dashboard_app: Any) -> AsyncIterator[httpx.AsyncClient]:
    """A browser-like client of ``dashboard_app`` (keeps cookies), logged in."""
    async with http_client(dashboard_app, auth=(USER, PASSWORD)) as client:
        yield client


def run_job(dsn: str, schema: str, *, queue: str, data: Any,
            handler: Callable[[Any], Any]) -> JobSnapshot:
    """Add a job and let a real worker run it once with ``handler``: what the
    page shows (output, errors, progress, attrs) is what the worker wrote."""
    with PortQueue(dsn, schema=schema) as pq:
        pq.create_queue(queue=queue, handler=handler)
        pq.start(maintenance=False, scheduler=False, poll_interval=0.2)
        try:
            added = pq.add_job(queue=queue, data=data)
            assert added.job_id is not None
            return pq.wait_for_job(job_id=added.job_id, timeout_seconds=10)
        finally:
            pq.stop()


def fail_job(dsn: str, schema: str, *, queue: str, data: Any, message: str) -> JobSnapshot:
    """A job that a real worker failed (one attempt) with ``message`` as its error."""
    def always_fails(job: Any) -> None:
        raise RuntimeError(message)

    job = run_job(dsn, schema, queue=queue, data=data, handler=always_fails)
    assert job.status is JobStatus.FAILED, job
    return job


async def fail_job_async(dsn: str, schema: str, **job: Any) -> JobSnapshot:
    return await asyncio.to_thread(fail_job, dsn, schema, **job)
