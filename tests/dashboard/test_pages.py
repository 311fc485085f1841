"""What the pages show: escaping of hostile text, paging, filters, headers."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from markupsafe import escape

from portqueue import AsyncPortQueue
from tests.dashboard.conftest import (
    BASE_URL,
    PASSWORD,
    USER,
    csrf_token,
    fail_job_async,
    job_ids_listed,
    run_job,
)

SCRIPT = "<script>window.__pwned=1</script>"
IMAGE = '<img src=x onerror="window.__pwned=2">'


async def test_hostile_text_is_escaped_everywhere(
    dashboard: httpx.AsyncClient, apq: AsyncPortQueue, pg_dsn: str, schema: str,
) -> None:
    queue = f"q{IMAGE}"
    failed = await fail_job_async(pg_dsn, schema, queue=queue, data={"html": SCRIPT},
                                  message=IMAGE + SCRIPT)
    added = await apq.add_job(queue=queue, data=SCRIPT, group_id=IMAGE)
    await apq.add_job(queue=queue, data={IMAGE: [SCRIPT]}, schedule={"start_every_seconds": 60})
    pages = ["/", f"/jobs/{failed.job_id}", f"/jobs/{added.job_id}", "/schedules",
             f"/jobs/new?queue={queue}"]
    listing = await dashboard.get("/jobs", params={"queue": queue, "group": IMAGE})
    assert listing.status_code == 200
    bodies = [listing.text]
    for path in pages:
        response = await dashboard.get(path)
        assert response.status_code == 200, path
        bodies.append(response.text)
    for body in bodies:
        assert "<script" not in body and "<img" not in body and "onerror=\"" not in body
    job_page = bodies[2]
    assert escape(IMAGE + SCRIPT) in job_page  # the error message, as text
    assert escape(queue) in bodies[1]
    assert escape('"' + SCRIPT + '"') in bodies[3]  # data, a JSON string


async def test_every_response_carries_a_strict_security_policy(
    dashboard: httpx.AsyncClient,
) -> None:
    for path in ["/", "/jobs", "/no-such-page", "/jobs?page=0"]:
        headers = (await dashboard.get(path)).headers
        policy = headers["content-security-policy"]
        assert "default-src 'none'" in policy and "frame-ancestors 'none'" in policy
        assert "unsafe-inline" not in policy and "script-src" not in policy
        assert headers["x-frame-options"] == "DENY"
        assert headers["referrer-policy"] == "same-origin"


async def _listed(dashboard: httpx.AsyncClient, **params: Any) -> list[str]:
    response = await dashboard.get("/jobs", params=params)
    assert response.status_code == 200, response.text
    return job_ids_listed(response.text)


async def test_jobs_page_pages_and_filters(
    dashboard: httpx.AsyncClient, apq: AsyncPortQueue, pg_dsn: str, schema: str,
) -> None:
    # First, while the queue is empty: the worker must not claim the others.
    failed = await fail_job_async(pg_dsn, schema, queue="bulk", data="x", message="no")
    grouped = await apq.add_jobs(queue="bulk", jobs=[{"data": i, "group_id": "g1"}
                                                     for i in range(30)])
    others = await apq.add_jobs(queue="bulk", jobs=[{"data": i} for i in range(30, 60)])
    elsewhere = await apq.add_job(queue="other", data={})
    newest_first = [str(r.job_id) for r in reversed(others)] + [
        str(r.job_id) for r in reversed(grouped)] + [failed.job_id]

    first = await _listed(dashboard, queue="bulk")
    second = await _listed(dashboard, queue="bulk", page="2")
    assert first == newest_first[:50] and second == newest_first[50:]
    page_one = (await dashboard.get("/jobs", params={"queue": "bulk"})).text
    assert "page 1 of 2 · 61 in all" in page_one and 'rel="next"' in page_one
    assert await _listed(dashboard, queue="bulk", page="3") == []

    assert await _listed(dashboard, queue="bulk", status="failed") == [failed.job_id]
    assert await _listed(dashboard, queue="bulk", group="g1") == [
        str(r.job_id) for r in reversed(grouped)]
    assert await _listed(dashboard, queue="bulk", group="g1", status="failed") == []
    assert await _listed(dashboard, queue="other") == [elsewhere.job_id]

    prompt = (await dashboard.get("/jobs")).text  # no queue: pick one
    assert 'href="/jobs?queue=bulk"' in prompt and 'href="/jobs?queue=other"' in prompt


async def test_bad_parameters_explain_themselves(dashboard: httpx.AsyncClient) -> None:
    for params, named in [({"queue": "q", "page": "0"}, "page"),
                          ({"queue": "q", "page": "x"}, "page"),
                          ({"queue": "q", "status": "lost"}, "status"),
                          ({"queue": "x" * 129}, "queue")]:
        response = await dashboard.get("/jobs", params=params)
        assert response.status_code == 400
        assert f"{named}:" in response.text
    assert (await dashboard.get("/jobs/not-a-uuid")).status_code == 404
    assert (await dashboard.get("/jobs/0190a6f0-0000-7000-8000-000000000000")).status_code == 404


async def test_queue_and_job_pages_show_the_numbers(
    dashboard: httpx.AsyncClient, apq: AsyncPortQueue, pg_dsn: str, schema: str,
) -> None:
    failed = await fail_job_async(pg_dsn, schema, queue="work", data={"n": 1}, message="kaput")
    await apq.add_jobs(queue="work", jobs=[{"data": i} for i in range(3)])
    await apq.pause_queue(queue="work")
    queues = (await dashboard.get("/")).text
    row = queues[queues.index('data-queue="work"'):]
    row = row[: row.index("</tr>")]
    cells = [cell.split(">")[-1] for cell in row.split("</a></td>")[1:7]]
    assert cells == ["3", "0", "0", "1", "0", "0"]  # pending … expired
    assert "1/min" in row  # the failure just now
    assert '<td class="paused">processing</td>' in row and "Resume" in row

    job = (await dashboard.get(f"/jobs/{failed.job_id}")).text
    for text in ["kaput", "RuntimeError", "attempt 1 failed",
                 "finished: failed", "created", "Retry", "Remove", "1 of 1"]:
        assert text in job, text
    assert ">Cancel<" not in job  # a finished job cannot be cancelled


def _report(job: Any) -> dict[str, Any]:
    job.set_progress(0.75)
    job.set_attrs({"step": "<render>"})
    return {"pages": 3, "note": "<b>done</b>"}


async def test_job_page_shows_output_progress_and_attrs(
    dashboard: httpx.AsyncClient, pg_dsn: str, schema: str,
) -> None:
    done = await asyncio.to_thread(
        run_job, pg_dsn, schema, queue="reports", data={"id": 7}, handler=_report)
    page = (await dashboard.get(f"/jobs/{done.job_id}")).text
    assert '<progress max="1" value="0.75"></progress> 75 %' in page
    assert escape('"step": "<render>"') in page
    assert escape('"note": "<b>done</b>"') in page and escape('"pages": 3') in page
    assert "finished: completed" in page and "Errors (0)" in page


async def test_links_and_redirects_keep_the_mount_prefix(
    dashboard_app: Any, apq: AsyncPortQueue,
) -> None:
    added = await apq.add_job(queue="mail", data={})
    transport = httpx.ASGITransport(app=dashboard_app, root_path="/ops/pq")
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL,
                                 auth=(USER, PASSWORD)) as client:
        listing = await client.get("/ops/pq/jobs", params={"queue": "mail"})
        assert listing.status_code == 200
        assert f'href="/ops/pq/jobs/{added.job_id}"' in listing.text
        assert 'href="/ops/pq/static/style.css"' in listing.text
        job_page = (await client.get(f"/ops/pq/jobs/{added.job_id}")).text
        assert f'action="/ops/pq/jobs/{added.job_id}/cancel"' in job_page
        cancelled = await client.post(f"/ops/pq/jobs/{added.job_id}/cancel",
                                      data={"csrf_token": csrf_token(job_page)})
        assert cancelled.headers["location"] == f"/ops/pq/jobs/{added.job_id}?notice=cancelled"
