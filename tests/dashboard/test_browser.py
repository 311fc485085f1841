"""End to end in headless Chromium: the real ``serve()`` in a subprocess on the
test database, driven by Playwright through Debian's /usr/bin/chromium.

Screenshots of every page land in build/screenshots/ (gitignored)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from portqueue import PauseMode, PortQueue
from tests.dashboard.conftest import PASSWORD, USER, fail_job
from tests.support.ports import free_port
from tests.support.rows import job_row, queue_row
from tests.support.waiting import wait_until

Db = psycopg.Connection[Any]

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "build" / "screenshots"
SCRIPT = "<script>window.__pwned=1</script>"
IMAGE = "<img src=x onerror=window.__pwned=2>"

pytestmark = pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason=f"no Chromium at {CHROMIUM}: install Debian's chromium")


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 401
    except httpx.TransportError:
        return False


@pytest.fixture(scope="module")
def dashboard_url(
    pg_dsn: str, migrated_schema: str, tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    """``portqueue.dashboard.serve`` running in its own process, with Basic auth.

    Shared by the module's tests: each test's ``schema`` fixture empties the
    tables under it (its idle connections hold no lock that would block that)."""
    port = free_port()
    code = ("from portqueue.dashboard import serve; "
            f"serve(dsn={pg_dsn!r}, schema={migrated_schema!r}, port={port}, "
            f"auth={USER + ':' + PASSWORD!r})")
    log = tmp_path_factory.mktemp("dashboard") / "server.log"
    with log.open("w") as output:
        server = subprocess.Popen([sys.executable, "-c", code], stdout=output, stderr=output)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: server.poll() is not None or _answers(url), timeout=20,
                   what="the dashboard to answer")
        assert server.poll() is None, log.read_text()
        yield url
    finally:
        server.terminate()
        server.wait(timeout=10)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@contextmanager
def _tab(browser: Any, url: str, **options: Any) -> Iterator[Any]:
    context = browser.new_context(
        base_url=url, http_credentials={"username": USER, "password": PASSWORD},
        viewport={"width": 1280, "height": 800}, **options)
    context.set_default_timeout(10_000)
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    tab.errors = errors
    try:
        yield tab
    finally:
        context.close()


@pytest.fixture
def page(browser: Any, dashboard_url: str, schema: str) -> Iterator[Any]:
    with _tab(browser, dashboard_url) as tab:
        yield tab


@pytest.fixture
def page_without_csp(browser: Any, dashboard_url: str, schema: str) -> Iterator[Any]:
    """A tab that ignores the Content-Security-Policy, so only escaping stands
    between hostile data and a running script."""
    with _tab(browser, dashboard_url, bypass_csp=True) as tab:
        yield tab


def _shoot(page: Any, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


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
    _shoot(page, "queues")
    page.goto("/jobs?queue=emails")
    assert page.locator("tr[data-job-id]").count() == 13
    _shoot(page, "jobs")
    page.goto("/schedules")
    assert "0 8 * * 1-5" in page.locator("#schedules").inner_text()
    _shoot(page, "schedules")

    # Retry the failed job from its page: it is pending again, in the page and the row.
    page.goto(f"/jobs/{failed.job_id}")
    assert page.locator("#job-status").inner_text() == "failed"
    assert "SMTP 451: try again later" in page.locator(".error-entry").inner_text()
    _shoot(page, "job-failed")
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
    _shoot(page, "queues-paused")

    # Add a job through the form; a typo first is refused with nothing written.
    page.goto("/jobs/new?queue=reports")
    page.fill("textarea[name=data]", '{"kind": weekly}')
    page.get_by_role("button", name="Add job").click()
    assert "not valid JSON" in page.locator("#form-error").inner_text()
    assert pq.get_jobs(queue="reports").total == 0
    _shoot(page, "add-job-error")
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
    _shoot(page, "job-hostile")
    assert page.errors == []
