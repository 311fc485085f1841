"""Actions are POSTs carrying a CSRF token; GET never acts."""

from __future__ import annotations

from typing import Any

import httpx
import psycopg

from portqueue import AsyncPortQueue, JobStatus
from portqueue.dashboard import create_app
from portqueue.dashboard.app import ROUTES
from tests.dashboard.conftest import PASSWORD, USER, csrf_token, fail_job_async, http_client
from tests.support.rows import job_row, queue_row

Db = psycopg.Connection[Any]
UNKNOWN_ID = "0190a6f0-0000-7000-8000-000000000000"


async def test_actions_without_a_valid_token_are_refused_and_change_nothing(
    dashboard: httpx.AsyncClient, dashboard_app: Any, apq: AsyncPortQueue, db: Db,
    pg_dsn: str, schema: str,
) -> None:
    failed = await fail_job_async(pg_dsn, schema, queue="mail", data={}, message="boom")
    pending = await apq.add_job(queue="mail", data={"n": 1})
    recurring = await apq.add_job(queue="mail", data={}, schedule={"start_every_seconds": 60})
    token = csrf_token((await dashboard.get("/jobs/new")).text)
    actions: list[tuple[str, dict[str, str]]] = [
        (f"/jobs/{failed.job_id}/retry", {}),
        (f"/jobs/{pending.job_id}/cancel", {}),
        (f"/jobs/{pending.job_id}/remove", {}),
        ("/queues/pause", {"queue": "mail", "mode": "all"}),
        ("/jobs/new", {"queue": "mail", "data": "{}"}),
        (f"/schedules/{recurring.schedule_id}/remove", {}),
    ]
    other_app = create_app(apq, auth=f"{USER}:{PASSWORD}")
    async with http_client(other_app, auth=(USER, PASSWORD)) as other_process:
        other_token = csrf_token((await other_process.get("/jobs/new")).text)
    for path, fields in actions:
        # One hex digit changed (always a different one: a token may end in "0").
        tampered = token[:-1] + ("1" if token.endswith("0") else "0")
        for supplied in [None, "", "0" * 64, tampered, other_token]:
            form = fields if supplied is None else {**fields, "csrf_token": supplied}
            response = await dashboard.post(path, data=form)
            assert response.status_code == 403, (path, supplied)
            assert "security token" in response.text
        # The right token from another site is refused too.
        cross_site = await dashboard.post(path, data={**fields, "csrf_token": token},
                                          headers={"Sec-Fetch-Site": "cross-site"})
        assert cross_site.status_code == 403
        foreign = await dashboard.post(path, data={**fields, "csrf_token": token},
                                       headers={"Origin": "http://evil.test"})
        assert foreign.status_code == 403
    # A valid-looking token without this browser's cookie is refused.
    async with http_client(dashboard_app, auth=(USER, PASSWORD)) as no_cookie:
        response = await no_cookie.post(f"/jobs/{failed.job_id}/retry",
                                        data={"csrf_token": token})
        assert response.status_code == 403

    assert job_row(db, schema, failed.job_id)["status"] == "failed"
    assert job_row(db, schema, str(pending.job_id))["status"] == "pending"
    assert queue_row(db, schema, "mail")["paused"] is None  # type: ignore[index]
    assert (await apq.get_jobs(queue="mail")).total == 2
    assert (await apq.get_schedules(queue="mail")).total == 1


async def test_get_of_an_action_url_does_not_act(
    dashboard: httpx.AsyncClient, apq: AsyncPortQueue, db: Db, schema: str,
) -> None:
    pending = await apq.add_job(queue="mail", data={})
    recurring = await apq.add_job(queue="mail", data={}, schedule={"start_every_seconds": 60})
    job_id = str(pending.job_id)
    for path in [f"/jobs/{job_id}/cancel", f"/jobs/{job_id}/remove", f"/jobs/{job_id}/retry",
                 "/queues/pause?queue=mail&mode=all", "/queues/resume?queue=mail",
                 f"/schedules/{recurring.schedule_id}/remove"]:
        response = await dashboard.get(path)
        assert response.status_code == 405, path
        assert response.headers["allow"] == "POST"
    assert job_row(db, schema, job_id)["status"] == "pending"
    assert queue_row(db, schema, "mail")["paused"] is None  # type: ignore[index]
    assert (await apq.get_schedules(queue="mail")).total == 1
    stats = await apq.get_queue_stats(queue="mail")
    assert stats.counts[JobStatus.PENDING] == 1 and stats.paused is None


async def test_the_token_cookie_is_strict_and_the_token_is_in_every_form(
    dashboard_app: Any, apq: AsyncPortQueue,
) -> None:
    await apq.add_job(queue="mail", data={})
    async with http_client(dashboard_app, auth=(USER, PASSWORD)) as browser:
        # A stylesheet does not hand out a token: only pages, which carry the forms.
        assert "set-cookie" not in (await browser.get("/static/style.css")).headers
        first = await browser.get("/")
        cookie = first.headers["set-cookie"]
        assert "portqueue_csrf=" in cookie and "SameSite=Strict" in cookie
        assert "HttpOnly" in cookie
        token = csrf_token(first.text)
        second = await browser.get("/")
        assert "set-cookie" not in second.headers  # one token per browser session
        assert csrf_token(second.text) == token
        assert second.text.count('name="csrf_token"') == 2  # pause processing, pause all


async def test_every_post_route_checks_the_token(dashboard: httpx.AsyncClient) -> None:
    """A new action added without the ``action`` wrapper fails here."""
    posts = [route for route in ROUTES if "POST" in (route.methods or ())]
    assert len(posts) >= 7
    for route in posts:
        path = route.path.format(**dict.fromkeys(route.param_convertors, UNKNOWN_ID))
        response = await dashboard.post(path, data={"queue": "q", "data": "{}"})
        assert response.status_code == 403, route.path
