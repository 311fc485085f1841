"""`portqueue dashboard`: the console script serves the real dashboard, with auth."""

from __future__ import annotations

import base64
import signal
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from portqueue import PortQueue
from tests.migrations.conftest import cli_command, cli_env
from tests.support.cli import Cli
from tests.support.ports import free_port
from tests.support.waiting import wait_until

PASSWORD = "s3cret-dash-pw"


def _get(url: str, user: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url)
    if user is not None:
        request.add_header("Authorization",
                           "Basic " + base64.b64encode(user.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""


def _answers(url: str) -> bool:
    try:
        return _get(url)[0] > 0
    except OSError:
        return False


@pytest.mark.slow
def test_dashboard_serves_with_basic_auth_until_interrupted(
    pg_dsn: str, schema: str, pq: PortQueue
) -> None:
    pq.add_job(queue="cli-dashboard-queue", data={})
    port = free_port()
    env = cli_env(PORTQUEUE_DSN=pg_dsn, PORTQUEUE_SCHEMA=schema,
                  PORTQUEUE_DASHBOARD_AUTH=f"ops:{PASSWORD}")
    process = subprocess.Popen([*cli_command(), "dashboard", "--port", str(port)], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}/"
    try:
        wait_until(lambda: process.poll() is not None or _answers(url), timeout=30,
                   what="the dashboard to listen")
        assert process.poll() is None, process.communicate()
        assert _get(url)[0] == 401, "no credentials, no page"
        status, page = _get(url, f"ops:{PASSWORD}")
        assert status == 200 and "cli-dashboard-queue" in page
    finally:
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr
    assert PASSWORD not in stdout + stderr


def test_bad_credentials_are_a_usage_error(pg_dsn: str, schema: str) -> None:
    result = Cli(pg_dsn, schema)("dashboard", "--token", "short")
    assert result.exit_code == 2 and "--token:" in result.stderr
    result = Cli(pg_dsn, schema)("dashboard", "--auth", "no-colon")
    assert result.exit_code == 2 and "--auth:" in result.stderr


def test_without_the_extra_it_says_what_to_install(
    pg_dsn: str, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # None in sys.modules makes `import portqueue.dashboard` raise ImportError,
    # as it does when the dashboard extra's packages are not installed.
    monkeypatch.setitem(sys.modules, "portqueue.dashboard", None)
    result = Cli(pg_dsn, schema)("dashboard")
    assert result.exit_code == 2
    assert "pip install 'portqueue[dashboard]'" in result.stderr
