"""Auto-refresh: the list pages reload themselves through a meta refresh,
which ?refresh=off pauses and ?refresh=<seconds> sets."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from portqueue import AsyncPortQueue, PortQueue
from tests.dashboard.conftest import BASE_URL, PASSWORD, USER, fail_job_async

META = re.compile(r'<meta http-equiv="refresh" content="(\d+); url=([^"]*)">')


def _meta(page: str) -> tuple[int, str] | None:
    found = META.findall(page)
    assert len(found) <= 1
    return (int(found[0][0]), found[0][1]) if found else None


def _control(page: str) -> str:
    match = re.search(r'<p class="refresh" id="refresh">.*?</p>', page, re.S)
    assert match is not None, "no refresh control"
    return match.group(0)


@pytest.mark.parametrize("path", ["/", "/jobs?queue=mail&status=pending", "/failures",
                                  "/workers"])
async def test_list_pages_reload_every_ten_seconds_and_pause(
    dashboard: httpx.AsyncClient, apq: AsyncPortQueue, path: str,
) -> None:
    await apq.add_job(queue="mail", data={})
    page = (await dashboard.get(path)).text
    query = path.partition("?")[2].replace("&", "&amp;")
    route = path.partition("?")[0]
    assert _meta(page) == (10, path.replace("&", "&amp;"))
    paused_url = f"{route}?{query}&amp;refresh=off" if query else f"{route}?refresh=off"
    assert f'Reloads every 10 s · <a href="{paused_url}">Pause auto-refresh</a>' in _control(page)

    paused = (await dashboard.get(paused_url.replace("&amp;", "&"))).text
    assert _meta(paused) is None
    resume = path.replace("&", "&amp;")
    assert f'Auto-refresh paused · <a href="{resume}">Resume auto-refresh</a>' in (
        _control(paused))


async def test_an_interval_is_kept_across_reloads_and_a_notice_is_not_repeated(
    dashboard: httpx.AsyncClient, schema: str,
) -> None:
    page = (await dashboard.get("/failures", params={
        "refresh": "30", "notice": "bulk_retried", "count": "2", "matched": "2"})).text
    assert "Retried 2 of 2" in page
    assert _meta(page) == (30, "/failures?refresh=30")
    assert 'href="/failures?refresh=off">Pause auto-refresh</a>' in page


@pytest.mark.parametrize("value", ["1", "3601", "fast", "-5", "٣"])
async def test_a_bad_interval_is_a_400_naming_refresh(
    dashboard: httpx.AsyncClient, schema: str, value: str,
) -> None:
    response = await dashboard.get("/workers", params={"refresh": value})
    assert response.status_code == 400 and "refresh" in response.text


async def test_a_job_page_reloads_while_the_job_is_unfinished_only(
    dashboard: httpx.AsyncClient, apq: AsyncPortQueue, pg_dsn: str, schema: str,
) -> None:
    pending = await apq.add_job(queue="mail", data={})
    assert _meta((await dashboard.get(f"/jobs/{pending.job_id}")).text) == (
        10, f"/jobs/{pending.job_id}")
    failed = await fail_job_async(pg_dsn, schema, queue="mail", data={}, message="boom")
    page = (await dashboard.get(f"/jobs/{failed.job_id}")).text
    assert _meta(page) is None and 'id="refresh"' not in page


async def test_forms_and_confirmations_never_reload(
    dashboard: httpx.AsyncClient, pq: PortQueue, schema: str,
) -> None:
    pq.add_job(queue="mail", data={})
    for path in ["/jobs/new", "/bulk?action=cancel&queue=mail", "/schedules", "/jobs"]:
        page = (await dashboard.get(path)).text
        assert _meta(page) is None and 'id="refresh"' not in page, path


async def test_the_reload_keeps_the_mount_prefix(dashboard_app: Any, schema: str) -> None:
    transport = httpx.ASGITransport(app=dashboard_app, root_path="/ops/pq")
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL,
                                 auth=(USER, PASSWORD)) as client:
        page = (await client.get("/ops/pq/workers", params={"page": "1"})).text
    assert _meta(page) == (10, "/ops/pq/workers?page=1")
    assert 'href="/ops/pq/workers?page=1&amp;refresh=off">Pause auto-refresh</a>' in page


async def test_queue_names_are_encoded_in_the_reload_url(
    dashboard: httpx.AsyncClient, apq: AsyncPortQueue,
) -> None:
    queue = 'q"; url=https://evil.test/<x>'
    await apq.add_job(queue=queue, data={})
    page = (await dashboard.get("/jobs", params={"queue": queue})).text
    meta = _meta(page)
    assert meta is not None
    assert meta[1] == "/jobs?queue=q%22%3B+url%3Dhttps%3A%2F%2Fevil.test%2F%3Cx%3E"
