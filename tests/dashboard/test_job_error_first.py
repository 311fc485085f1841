"""A failed job's page opens with its error, above the details and the data."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx

from portqueue import JobStatus, PortQueue
from tests.dashboard.conftest import fail_job_async, run_job

SCRIPT = "<script>window.__pwned=1</script>"


def _last_error(page: str) -> str:
    match = re.search(r'<section id="last-error".*?</section>', page, re.S)
    assert match is not None, "no error box on the page"
    return match.group(0)


async def test_the_error_comes_before_details_data_and_timeline(
    dashboard: httpx.AsyncClient, pg_dsn: str, schema: str,
) -> None:
    failed = await fail_job_async(pg_dsn, schema, queue="emails", data={"big": "x" * 3000},
                                  message=f"SMTP 554 {SCRIPT}")
    body = (await dashboard.get(f"/jobs/{failed.job_id}")).text
    box = _last_error(body)
    assert "<strong>RuntimeError</strong>: SMTP 554 &lt;script&gt;" in box
    assert "Failed on attempt 1 of 1" in box
    assert 'class="traceback"' in box and "always_fails" in box  # the worker's traceback
    assert SCRIPT not in body
    assert body.index('id="last-error"') < body.index("<h2>Details</h2>") < body.index(
        'id="job-data"')


async def test_the_newest_of_several_attempts_is_shown_and_the_others_linked(
    dashboard: httpx.AsyncClient, pg_dsn: str, schema: str,
) -> None:
    def flaky(job: Any) -> None:
        raise ValueError(f"attempt {job.attempt} broke")

    def run() -> Any:
        with PortQueue(pg_dsn, schema=schema) as pq:
            pq.create_queue(queue="flaky", handler=flaky, retry={"max_attempts": 2})
            pq.start(maintenance=False, scheduler=False, poll_interval=0.2)
            try:
                added = pq.add_job(queue="flaky", data={})
                return pq.wait_for_job(job_id=str(added.job_id), timeout_seconds=15)
            finally:
                pq.stop()

    failed = await asyncio.to_thread(run)
    assert failed.status is JobStatus.FAILED and len(failed.errors) == 2
    box = _last_error((await dashboard.get(f"/jobs/{failed.job_id}")).text)
    assert "ValueError</strong>: attempt 2 broke" in box and "attempt 1 broke" not in box
    assert "Failed on attempt 2 of 2" in box
    assert '<a href="#errors">1 earlier attempt(s) failed too</a>' in box


async def test_no_error_box_on_a_job_that_did_not_fail(
    dashboard: httpx.AsyncClient, pg_dsn: str, schema: str,
) -> None:
    done = await asyncio.to_thread(run_job, pg_dsn, schema, queue="ok", data={},
                                   handler=lambda job: {"sent": True})
    body = (await dashboard.get(f"/jobs/{done.job_id}")).text
    assert 'id="last-error"' not in body
