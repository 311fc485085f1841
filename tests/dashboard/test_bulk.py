"""Bulk retry and cancel of a filtered list: confirm (GET), act (CSRF-checked
POST), report how many were acted on; checked against the rows."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import psycopg
import pytest

from portqueue import AsyncPortQueue, PortQueue, insight
from tests.dashboard.bulk_forms import confirm_form, statuses
from tests.dashboard.conftest import csrf_token, fail_job_async, http_client
from tests.dashboard.failure_rows import add_failed
from tests.support.rows import finish, job_row

Db = psycopg.Connection[Any]


async def test_retry_every_failure_across_queues(
    dashboard: httpx.AsyncClient, pq: PortQueue, db: Db, pg_dsn: str, schema: str,
) -> None:
    real = await fail_job_async(pg_dsn, schema, queue="emails", data={}, message="boom")
    others = add_failed(pq, db, schema, queue="reports", count=2)
    done = pq.add_job(queue="reports", data="completed: not a failure").job_id
    finish(db, schema, str(done), "completed")
    failures = await dashboard.get("/failures")
    assert ('href="/bulk?action=retry&amp;status=failed&amp;back=failures">Retry all 3…'
            in failures.text)

    confirm = await dashboard.get("/bulk", params={"action": "retry", "status": "failed",
                                                   "back": "failures"})
    assert confirm.status_code == 200
    assert "<h1>Retry 3 jobs?</h1>" in confirm.text and "every queue" in confirm.text
    # Showing the confirmation changed nothing.
    assert statuses(db, schema, [real.job_id, *others]) == ["failed"] * 3

    form = confirm_form(confirm.text)
    assert form["action"] == "retry" and form["status"] == "failed" and form["queue"] == ""
    response = await dashboard.post("/bulk", data=form)
    assert response.status_code == 303
    target = urlsplit(response.headers["location"])
    assert target.path == "/failures"
    assert parse_qs(target.query) == {"notice": ["bulk_retried"], "count": ["3"],
                                      "matched": ["3"]}
    assert statuses(db, schema, [real.job_id, *others]) == ["pending"] * 3
    assert job_row(db, schema, str(done))["status"] == "completed"
    shown = await dashboard.get(response.headers["location"])
    assert "Retried 3 of 3 matching job(s)." in shown.text
    assert "No failed jobs." in shown.text


async def test_cancel_the_pending_jobs_of_one_group(
    dashboard: httpx.AsyncClient, apq: AsyncPortQueue, db: Db, schema: str,
) -> None:
    mine = [str((await apq.add_job(queue="mail", data=n, group_id="tenant-1")).job_id)
            for n in range(3)]
    theirs = str((await apq.add_job(queue="mail", data=9, group_id="tenant-2")).job_id)
    elsewhere = str((await apq.add_job(queue="sms", data=0, group_id="tenant-1")).job_id)
    listing = await dashboard.get("/jobs", params={"queue": "mail", "status": "pending",
                                                   "group": "tenant-1"})
    assert ("/bulk?action=cancel&amp;queue=mail&amp;status=pending&amp;group=tenant-1"
            "&amp;back=jobs") in listing.text
    assert "action=retry" not in listing.text  # nothing pending can be retried

    confirm = await dashboard.get("/bulk", params={
        "action": "cancel", "queue": "mail", "status": "pending", "group": "tenant-1",
        "back": "jobs"})
    assert "<h1>Cancel 3 jobs?</h1>" in confirm.text
    response = await dashboard.post("/bulk", data=confirm_form(confirm.text))
    assert response.status_code == 303
    target = urlsplit(response.headers["location"])
    assert target.path == "/jobs"
    assert parse_qs(target.query) == {
        "notice": ["bulk_cancelled"], "count": ["3"], "matched": ["3"], "queue": ["mail"],
        "status": ["pending"], "group": ["tenant-1"]}
    assert statuses(db, schema, mine) == ["cancelled"] * 3
    assert statuses(db, schema, [theirs, elsewhere]) == ["pending", "pending"]
    assert "Cancelled 3 of 3 matching job(s)." in (
        await dashboard.get(response.headers["location"])).text


async def test_at_most_a_batch_per_submit_said_on_the_page(
    dashboard: httpx.AsyncClient, pq: PortQueue, db: Db, schema: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(insight, "MAX_BULK", 3)
    failed = add_failed(pq, db, schema, queue="big", count=5)
    confirm = await dashboard.get("/bulk", params={"action": "retry", "queue": "big",
                                                   "status": "failed"})
    assert "At most 3 jobs are acted on per submit" in confirm.text
    response = await dashboard.post("/bulk", data=confirm_form(confirm.text))
    assert parse_qs(urlsplit(response.headers["location"]).query)["count"] == ["3"]
    assert statuses(db, schema, failed) == ["pending"] * 3 + ["failed"] * 2  # oldest first


async def test_refused_without_csrf_or_from_another_site_and_nothing_changes(
    dashboard: httpx.AsyncClient, dashboard_app: Any, pq: PortQueue, db: Db, schema: str,
) -> None:
    failed = add_failed(pq, db, schema, queue="q", count=2)
    confirm = await dashboard.get("/bulk", params={"action": "retry", "status": "failed"})
    form = confirm_form(confirm.text)
    token = form["csrf_token"]
    no_token = {key: value for key, value in form.items() if key != "csrf_token"}
    for data, headers in [
        (no_token, {}),
        ({**form, "csrf_token": "0" * 64}, {}),
        (form, {"Sec-Fetch-Site": "cross-site"}),
        (form, {"Origin": "http://evil.test"}),
    ]:
        response = await dashboard.post("/bulk", data=data, headers=headers)
        assert response.status_code == 403, headers
    async with http_client(dashboard_app, auth=("admin", "correct horse battery")) as other:
        assert (await other.post("/bulk", data={**form, "csrf_token": token})).status_code == 403
    async with http_client(dashboard_app) as anonymous:
        assert (await anonymous.get("/bulk", params={"action": "retry"})).status_code == 401
        assert (await anonymous.post("/bulk", data=form)).status_code == 401
    assert statuses(db, schema, failed) == ["failed", "failed"]


@pytest.mark.parametrize(("query", "named"), [
    ({"action": "remove"}, "action"),
    ({"action": "retry", "status": "pending"}, "status"),
    ({"action": "cancel", "status": "failed"}, "status"),
    ({"action": "retry", "status": "nope"}, "status"),
    ({"action": "retry", "back": "https://evil.test/"}, "back"),
    ({"action": "retry", "queue": "q" * 129}, "queue"),
])
async def test_bad_parameters_are_a_400_that_names_them(
    dashboard: httpx.AsyncClient, pq: PortQueue, db: Db, schema: str,
    query: dict[str, str], named: str,
) -> None:
    failed = add_failed(pq, db, schema, queue="q", count=1)
    page = await dashboard.get("/bulk", params=query)
    assert page.status_code == 400 and named in page.text
    token = csrf_token((await dashboard.get("/jobs/new")).text)
    acted = await dashboard.post("/bulk", data={**query, "csrf_token": token})
    assert acted.status_code == 400 and named in acted.text
    assert statuses(db, schema, failed) == ["failed"]


async def test_a_crafted_notice_count_is_not_shown(
    dashboard: httpx.AsyncClient, schema: str,
) -> None:
    for count in ["<b>lots</b>", "-1", "", "1e9", "٣"]:
        page = await dashboard.get("/failures", params={
            "notice": "bulk_retried", "count": count, "matched": "5"})
        assert page.status_code == 200
        assert "Retried" not in page.text and "<b>lots" not in page.text
    fine = await dashboard.get("/failures", params={
        "notice": "bulk_retried", "count": "2", "matched": "5"})
    assert "Retried 2 of 5 matching job(s)." in fine.text
