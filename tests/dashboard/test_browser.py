"""End to end in headless Chromium: the real ``serve()`` in a subprocess on the
test database, driven by Playwright through Debian's /usr/bin/chromium.

Screenshots of every page land in build/screenshots/ (gitignored)."""

from __future__ import annotations

from typing import Any

import psycopg

from portqueue import PauseMode, PortQueue
from tests.dashboard.browser import needs_chromium, shoot
from tests.dashboard.conftest import fail_job
from tests.support.rows import job_row, queue_row

Db = psycopg.Connection[Any]

SCRIPT = "<script>window.__pwned=1</script>"
IMAGE = "<img src=x onerror=window.__pwned=2>"

pytestmark = needs_chromium


def test_pages_retry_pause_and_add_in_a_real_browser(
    page: Any, pq: PortQueue, db: Db, pg_dsn: str, schema: str,
) -> None:
    failed = fail_job(pg_dsn, schema, queue="emails", data={"to": "a@b.com"},
                      message="SMTP 451: try again later")
    pq.add_jobs(queue="emails", jobs=[{"data": {"to": f"user{i}@b.com"}, "group_id": "news"}
                                      for i in range(12)])
    pq.add_job(queue="reports", data={"kind": "daily"},
               schedule={"cron": {"pattern": "0 8 * * 1-5", "tz": "Europe/Paris"}})

    page.goto("/")
    row = page.locator('tr[data-queue="emails"]')
    assert row.locator("td.paused").inner_text() == "no"
    shoot(page, "queues")
    page.goto("/jobs?queue=emails")
    assert page.locator("tr[data-job-id]").count() == 13
    shoot(page, "jobs")
    page.goto("/schedules")
    assert "0 8 * * 1-5" in page.locator("#schedules").inner_text()
    shoot(page, "schedules")

    # Retry the failed job from its page: it is pending again, in the page and the row.
    page.goto(f"/jobs/{failed.job_id}")
    assert page.locator("#job-status").inner_text() == "failed"
    assert "SMTP 451: try again later" in page.locator(".error-entry").inner_text()
    shoot(page, "job-failed")
    page.get_by_role("button", name="Retry").click()
    page.wait_for_url(lambda url: url.endswith(f"/jobs/{failed.job_id}?notice=retried"))
    assert page.locator("#job-status").inner_text() == "pending"
    assert job_row(db, schema, failed.job_id)["status"] == "pending"

    # Pause the queue with its button.
    page.goto("/")
    page.locator('tr[data-queue="emails"]').get_by_role("button", name="Pause", exact=True).click()
    page.wait_for_url(lambda url: url.endswith("/?notice=paused"))
    assert page.locator('tr[data-queue="emails"] td.paused').inner_text() == "processing"
    assert pq.get_queue_stats(queue="emails").paused is PauseMode.PROCESSING
    assert queue_row(db, schema, "emails")["paused"] == "processing"  # type: ignore[index]
    shoot(page, "queues-paused")

    # Add a job through the form; a typo first is refused with nothing written.
    page.goto("/jobs/new?queue=reports")
    page.fill("textarea[name=data]", '{"kind": weekly}')
    page.get_by_role("button", name="Add job").click()
    assert "not valid JSON" in page.locator("#form-error").inner_text()
    assert pq.get_jobs(queue="reports").total == 0
    shoot(page, "add-job-error")
    page.fill("textarea[name=data]", '{"kind": "weekly"}')
    page.get_by_role("button", name="Add job").click()
    page.wait_for_url(lambda url: url.endswith("?notice=added"))
    job_id = page.url.split("/jobs/")[1].split("?")[0]
    assert job_row(db, schema, job_id)["data"] == {"kind": "weekly"}
    assert '"weekly"' in page.locator("#job-data").inner_text()
    assert page.errors == []


def test_hostile_job_data_renders_inert(
    page_without_csp: Any, pq: PortQueue, pg_dsn: str, schema: str,
) -> None:
    page = page_without_csp
    scripted = pq.add_job(queue="hostile", data=SCRIPT, group_id=IMAGE)
    imaged = pq.add_job(queue="hostile", data={"html": IMAGE, "list": [SCRIPT]})
    failed = fail_job(pg_dsn, schema, queue=f"q{IMAGE}", data=[IMAGE],
                      message=f"{IMAGE}{SCRIPT}")
    views = [(f"/jobs/{scripted.job_id}", SCRIPT), (f"/jobs/{imaged.job_id}", IMAGE),
             (f"/jobs/{failed.job_id}", IMAGE), ("/jobs?queue=hostile", SCRIPT),
             ("/", IMAGE)]
    for path, visible in views:
        page.goto(path)
        page.wait_for_load_state("load")
        assert page.evaluate("typeof window.__pwned") == "undefined", path
        assert visible in page.locator("main").inner_text(), path
        assert page.locator("main script, main img").count() == 0, path
    page.goto(f"/jobs/{failed.job_id}")
    shoot(page, "job-hostile")
    assert page.errors == []
