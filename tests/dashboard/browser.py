"""The dashboard in a real browser: ``portqueue.dashboard.serve`` in a process of
its own, Debian's Chromium driven by Playwright, tabs logged in with Basic auth,
and screenshots under build/screenshots/ to look at. Shared by the browser
tests (their fixtures and skip mark)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.dashboard.accounts import PASSWORD, USER
from tests.support.ports import free_port, http_status
from tests.support.waiting import wait_until

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "build" / "screenshots"

needs_chromium = pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason=f"no Chromium at {CHROMIUM}: install Debian's chromium")


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
        wait_until(lambda: server.poll() is not None or http_status(url) == 401, timeout=20,
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


def shoot(page: Any, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
