"""The operator pages in headless Chromium (the real ``serve()`` in its own
process, see test_browser.py): workers, failures with a bulk retry, the error
first on a failed job, auto-refresh and its pause, the activity charts.

Screenshots land in build/screenshots/ (gitignored)."""
# The browser and server fixtures are test_browser.py's, imported: a test's
# ``page`` argument is that fixture, not a redefinition.

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from portqueue import PortQueue
from tests.dashboard.browser import SCREENSHOTS, needs_chromium, shoot
from tests.dashboard.conftest import fail_job
from tests.dashboard.failure_rows import add_failed
from tests.dashboard.worker_rows import insert_worker
from tests.support.rows import job_row, update_job
from tests.support.waiting import wait_until

Db = psycopg.Connection[Any]

pytestmark = needs_chromium


@pytest.fixture
def busy_worker(pg_dsn: str, schema: str) -> Iterator[PortQueue]:
    """A real worker on "reports" (concurrency 4) running two jobs that wait to be let go."""
    release = threading.Event()
    running: list[str] = []

    def holds(job: Any) -> None:
        running.append("started")
        release.wait(30)

    with PortQueue(pg_dsn, schema=schema) as pq:
        pq.create_queue(queue="reports", handler=holds, concurrency=4)
        pq.start(maintenance=False, scheduler=False, poll_interval=0.2)
        try:
            pq.add_jobs(queue="reports", jobs=[{"data": {"n": n}} for n in range(2)])
            wait_until(lambda: len(running) == 2, timeout=15, what="two jobs to start")
            yield pq
        finally:
            release.set()
            pq.stop()


def test_workers_page(page: Any, busy_worker: PortQueue, db: Db, schema: str) -> None:
    insert_worker(db, schema, hostname="batch-7.internal", pid=918, queues=["emails", "sms"],
                  concurrency=20, instance_key="eu-west-1b", seen_ago_seconds=300)
    page.goto("/workers?refresh=off")
    rows = page.locator("tr[data-worker-id]")
    assert rows.count() == 2
    live = page.locator("tr[data-worker-id]:not(.stale)")
    cells = live.locator("td").all_inner_texts()
    assert cells[2] == "reports" and cells[3] == "4" and cells[4] == "2"
    assert "stale" in page.locator("tr.stale").inner_text()
    shoot(page, "workers")
    assert page.errors == []


def test_failures_bulk_retry_and_the_error_first(
    page: Any, pq: PortQueue, db: Db, pg_dsn: str, schema: str,
) -> None:
    real = fail_job(pg_dsn, schema, queue="emails", data={"to": "a@b.com"},
                    message="SMTP 554 5.7.1: relay access denied for a@b.com")
    bulk = add_failed(pq, db, schema, queue="invoices", count=3,
                      message="PDF renderer timed out after 30 s on invoice")
    page.goto("/failures?refresh=off")
    assert page.locator("#failures tbody tr").count() == 4
    assert "relay access denied" in page.locator(f'tr[data-job-id="{real.job_id}"]').inner_text()
    shoot(page, "failures")

    # The failed job's page: the error is above the fold of a 1280x800 window.
    page.goto(f"/jobs/{real.job_id}")
    box = page.locator("#last-error").bounding_box()
    assert box is not None and box["y"] + box["height"] <= 800, box
    assert "relay access denied" in page.locator("#last-error").inner_text()
    page.screenshot(path=str(_screenshot_path("job-failed-top")))  # the first screenful

    page.goto("/failures?refresh=off")
    page.get_by_role("link", name="Retry all 4…").click()
    assert page.locator("h1").inner_text() == "Retry 4 jobs?"
    shoot(page, "bulk-confirm")
    assert job_row(db, schema, real.job_id)["status"] == "failed"  # nothing yet
    page.get_by_role("button", name="Retry 4 jobs").click()
    page.wait_for_url(lambda url: "notice=bulk_retried" in url)
    assert "Retried 4 of 4 matching job(s)." in page.locator(".notice").inner_text()
    assert [job_row(db, schema, i)["status"] for i in [real.job_id, *bulk]] == ["pending"] * 4
    shoot(page, "bulk-done")
    assert page.errors == []


def test_auto_refresh_reloads_and_pauses(page: Any, pq: PortQueue, schema: str) -> None:
    pq.add_job(queue="emails", data={})
    page.goto("/?refresh=2")
    cell = page.locator('tr[data-queue="emails"] td.number').first
    assert cell.inner_text() == "1"
    pq.add_job(queue="emails", data={})
    # The page reloads by itself and shows the new count.
    wait_until(lambda: cell.inner_text() == "2", timeout=15, what="the page to reload")
    assert "Reloads every 2 s" in page.locator("#refresh").inner_text()
    page.get_by_role("link", name="Pause auto-refresh").click()
    page.wait_for_url(lambda url: url.endswith("refresh=off"))
    assert page.locator('meta[http-equiv="refresh"]').count() == 0
    assert "Auto-refresh paused" in page.locator("#refresh").inner_text()
    shoot(page, "queues-refresh-paused")
    page.get_by_role("link", name="Resume auto-refresh").click()
    page.wait_for_url(lambda url: url.endswith("/"))
    assert page.locator('meta[http-equiv="refresh"]').count() == 1
    assert page.errors == []


def test_activity_charts(page: Any, pq: PortQueue, db: Db, schema: str) -> None:
    # A shaped hour: a steady load with a burst of failures twenty minutes ago and
    # a slow patch (start latency) ten minutes ago.
    ids = [str(r.job_id) for r in pq.add_jobs(
        queue="emails", jobs=[{"data": {"n": n}} for n in range(400)])]
    # One minute for all 400 updates: each one's own now() would move the
    # later ones a bucket along when the updates straddle a minute's end.
    (anchor,) = db.execute("SELECT date_trunc('minute', now())::text").fetchone() or ("",)
    for n, job_id in enumerate(ids):
        minute = n % 50
        failed = 18 <= minute <= 22 and n % 3 == 0
        latency = 0.05 + (6.0 if 8 <= minute <= 11 else 0.0) + (n % 7) * 0.03
        at = f"'{anchor}'::timestamptz - interval '{minute} min' + interval '{n % 50} s'"
        update_job(db, schema, job_id,
                   f"status = '{'failed' if failed else 'completed'}', attempt = 1, "
                   f"started_at = {at}, finished_at = {at} + interval '1 s', "
                   f"start_after = {at} - interval '{latency} s'")
    page.goto("/activity?refresh=off")
    assert page.locator("#throughput-chart rect.completed").count() == 50
    assert page.locator("#throughput-chart rect.failed").count() == 5
    assert page.locator("#failure-rate-chart polyline.failed").count() >= 1
    assert page.locator("#latency-chart polyline.p95").count() >= 1
    shoot(page, "activity")
    assert page.errors == []


def _screenshot_path(name: str) -> Any:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS / f"{name}.png"
