"""Which ``Host`` the dashboard serves (DNS rebinding), the token's sessions,
and the token kept out of every log line.

The rebinding and logging tests run the real ``portqueue dashboard`` in its
own process and talk to it over TCP with a real HTTP client: a DNS-rebinding
page is a browser sending ``Host: evil.example`` (and ``Origin:
http://evil.example``) to 127.0.0.1, which is exactly what these requests
send.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from portqueue import AsyncPortQueue, PortQueue
from portqueue.dashboard import create_app
from portqueue.dashboard.sessions import new_session, session_key
from tests.dashboard.conftest import TOKEN, csrf_token, http_client
from tests.migrations.conftest import cli_command, cli_env
from tests.support.cli import Cli
from tests.support.ports import free_port, http_status
from tests.support.waiting import wait_until, wait_until_async

ALLOWED = "dash.example"
SESSION_COOKIE = "portqueue_session"


@dataclass
class Server:
    process: subprocess.Popen[str]
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        return self.log.read_text()


@pytest.fixture(scope="module")
def start_dashboard(
    pg_dsn: str, migrated_schema: str, tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Any]:
    """Starts ``portqueue dashboard ARGS`` (stdout and stderr to one file); all
    are stopped with SIGINT at the end of the module."""
    started: list[Server] = []

    def start(*args: str, **env: str) -> Server:
        port = free_port()
        log = tmp_path_factory.mktemp("dashboard") / "server.log"
        environment = cli_env(PORTQUEUE_DSN=pg_dsn, PORTQUEUE_SCHEMA=migrated_schema, **env)
        with log.open("w") as output:
            process = subprocess.Popen(
                [*cli_command(), "dashboard", "--port", str(port), *args], env=environment,
                stdout=output, stderr=subprocess.STDOUT, text=True)
        server = Server(process, port, log)
        started.append(server)
        wait_until(lambda: process.poll() is not None or http_status(server.url) is not None,
                   timeout=30, what="the dashboard to listen")
        assert process.poll() is None, server.output()
        return server

    yield start
    for server in started:
        server.process.send_signal(signal.SIGINT)
        try:
            server.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait()


@pytest.fixture(scope="module")
def open_dashboard(start_dashboard: Any) -> Server:
    """No authentication (the default), on 127.0.0.1, with one name allowed."""
    server: Server = start_dashboard("--allow-host", ALLOWED)
    return server


@pytest.fixture(scope="module")
def token_dashboard(start_dashboard: Any) -> Server:
    server: Server = start_dashboard(PORTQUEUE_DASHBOARD_TOKEN=TOKEN)
    return server


def _as_host(server: Server, name: str, **headers: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, timeout=10,
                        headers={"Host": f"{name}:{server.port}", **headers})


def test_a_rebinding_page_can_neither_read_a_job_nor_remove_it(
    open_dashboard: Server, pq: PortQueue, schema: str
) -> None:
    added = pq.add_job(queue="rebinding", data={"secret": "payroll-4711"})
    job_page = f"/jobs/{added.job_id}"

    # The attacker's page, same-origin with evil.example once its name points at 127.0.0.1.
    evil_origin = f"http://evil.example:{open_dashboard.port}"
    with _as_host(open_dashboard, "evil.example", Origin=evil_origin) as evil:
        for path in ["/", job_page, "/jobs?queue=rebinding", "/jobs/new", "/schedules",
                     "/static/style.css"]:
            read = evil.get(path)
            assert read.status_code == 421, (path, read.status_code)
            assert "payroll-4711" not in read.text and "csrf_token" not in read.text
            assert "set-cookie" not in read.headers, "no CSRF cookie, no session"
            assert read.headers["x-content-type-options"] == "nosniff"

    # Even holding a browser's valid CSRF cookie and token, it cannot act.
    with _as_host(open_dashboard, "127.0.0.1") as browser:
        shown = browser.get(job_page)
        assert shown.status_code == 200 and "payroll-4711" in shown.text
        token = csrf_token(shown.text)
        cookies = "; ".join(f"{name}={value}" for name, value in browser.cookies.items())
    with _as_host(open_dashboard, "evil.example", Origin=evil_origin, Cookie=cookies) as evil:
        removed = evil.post(f"{job_page}/remove", data={"csrf_token": token})
        assert removed.status_code == 421
    assert pq.get_job(job_id=added.job_id) is not None, "the job was removed"


@pytest.mark.parametrize("name", ["evil.example", "EVIL.example", "127.0.0.1.evil.example",
                                  "localhost.evil.example", "dash.example.evil.example",
                                  "0x7f.0.0.1", "2130706433"])
def test_other_names_are_refused(open_dashboard: Server, name: str) -> None:
    with _as_host(open_dashboard, name) as client:
        assert client.get("/").status_code == 421


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "[::1]:{port}",
                                  "LOCALHOST:{port}", "localhost", "127.0.0.1",
                                  f"{ALLOWED}:{{port}}", ALLOWED, f"{ALLOWED.upper()}."])
def test_loopback_names_and_the_allow_list_are_served(
    open_dashboard: Server, schema: str, host: str
) -> None:
    headers = {"Host": host.format(port=open_dashboard.port)}
    page = httpx.get(open_dashboard.url + "/", headers=headers, timeout=10)
    assert page.status_code == 200, (host, page.status_code)


@pytest.mark.parametrize("host", ["", "evil example", "a@localhost", "localhost:80:80",
                                  "[::1", "localhost/x"])
async def test_a_malformed_host_is_a_400(apq: AsyncPortQueue, host: str) -> None:
    async with http_client(create_app(apq)) as client:
        refused = await client.get("/", headers={"Host": host})
        assert refused.status_code == 400, host
        assert "csrf_token" not in refused.text and "set-cookie" not in refused.headers


async def test_the_allow_list_is_the_app_factorys_parameter(apq: AsyncPortQueue) -> None:
    app = create_app(apq, allowed_hosts=["dash.example", "10.0.0.5", "[fd00::1]"])
    async with http_client(app) as client:
        for host in ["dash.example", "10.0.0.5:8080", "[fd00::1]:8080", "localhost:1"]:
            assert (await client.get("/", headers={"Host": host})).status_code == 200, host
        assert (await client.get("/", headers={"Host": "other.example"})).status_code == 421
    async with http_client(create_app(apq, allowed_hosts=["*"])) as anything:
        assert (await anything.get("/", headers={"Host": "other.example"})).status_code == 200
    for bad in [["http://dash.example"], ["dash.example:8080"], ["dash example"], "dash.example",
                [""], [None]]:
        with pytest.raises(ValueError, match=r"^allowed_hosts: "):
            create_app(apq, allowed_hosts=bad)  # type: ignore[arg-type]


# --- the token, its sessions, the logs ---


def test_the_token_never_reaches_the_log(token_dashboard: Server, schema: str) -> None:
    cookies: list[str] = []
    for path in ["/?token=" + TOKEN, f"/jobs?queue=a&token={TOKEN}&page=1",
                 "/?tok%65n=" + TOKEN, f"/?token={TOKEN}-wrong"]:
        with _as_host(token_dashboard, "localhost") as browser:
            answer = browser.get(path)
            assert answer.status_code in (303, 401), (path, answer.status_code)
            cookies += [value for name, value in browser.cookies.items()
                        if name == SESSION_COOKIE]
    with _as_host(token_dashboard, "localhost", Authorization=f"Bearer {TOKEN}") as script:
        assert script.get("/").status_code == 200
    with _as_host(token_dashboard, "localhost", Cookie=f"{SESSION_COOKIE}={cookies[0]}") as browser:
        assert browser.get("/schedules").status_code == 200
    assert len(cookies) == 3, "three links held the token (one spelled %65)"

    def logged() -> str:
        # Every request's access line, the last one included, has been written.
        text = token_dashboard.output()
        return text if '"GET /schedules HTTP/1.1" 200' in text else ""

    log = wait_until(logged, timeout=10, what="the access log lines")
    assert '"GET /?token=*** HTTP/1.1" 303' in log
    assert '"GET /jobs?queue=a&token=***&page=1 HTTP/1.1" 303' in log
    assert '"GET /?tok%65n=*** HTTP/1.1" 303' in log
    assert '"GET /?token=*** HTTP/1.1" 401' in log, "a wrong token is redacted too"
    assert TOKEN not in log, f"the token leaked: {log}"
    for cookie in cookies:
        assert cookie not in log


async def test_each_browser_gets_its_own_expiring_session(apq: AsyncPortQueue) -> None:
    app = create_app(apq, token=TOKEN)
    set_cookies = []
    for _ in range(2):
        async with http_client(app) as browser:
            exchanged = await browser.get(f"/?token={TOKEN}")
            assert exchanged.status_code == 303
            set_cookies.append(exchanged.headers["set-cookie"])
            assert (await browser.get("/")).status_code == 200
    first, second = set_cookies
    assert first.split(";")[0] != second.split(";")[0], "two browsers, one session"
    flags = {flag.strip() for flag in first.split(";")[1:]}
    assert {"HttpOnly", "SameSite=Lax", "Path=/", "Max-Age=43200"} <= flags
    assert TOKEN not in first


async def _status_with(app: Any, cookie: str) -> int:
    # A client without a cookie jar: the browser's own expiry is not what is tested.
    async with http_client(app) as client:
        header = f"{SESSION_COOKIE}={cookie}".encode("latin-1")  # what a header can carry
        return (await client.get("/", headers={b"Cookie": header})).status_code


async def test_tampered_forged_and_expired_sessions_are_refused(apq: AsyncPortQueue) -> None:
    app = create_app(apq, token=TOKEN, session_lifetime_seconds=3600)
    key = session_key(TOKEN)
    now = int(time.time())
    valid = new_session(key)
    assert await _status_with(app, valid) == 200
    issued, nonce, signature = valid.split(".")
    flipped = signature[:-1] + ("0" if signature[-1] != "0" else "1")
    refused = [
        f"{issued}.{nonce}.{flipped}",                    # signature changed
        f"{now + 1}.{nonce}.{signature}",                 # a later start, same signature
        f"{issued}.{nonce}x.{signature}",                 # another nonce
        new_session(session_key(TOKEN + "-old")),         # signed under another token
        new_session(key, issued=now - 3601),              # older than the lifetime
        new_session(key, issued=now + 3600),              # from the future
        "", "...", valid + ".", "²" + valid[1:],
        # What the cookie used to be: a fixed HMAC of the token, the same for everyone.
        "6d1f1fa7a6b4a5ee3bb3ba2f1e5a6f9e2c1c8d9b0a7e6f5d4c3b2a1908172635",
    ]
    for cookie in refused:
        assert await _status_with(app, cookie) == 401, cookie


async def test_a_session_ends_after_its_lifetime(apq: AsyncPortQueue) -> None:
    app = create_app(apq, token=TOKEN, session_lifetime_seconds=1)
    async with http_client(app) as browser:
        exchanged = await browser.get(f"/?token={TOKEN}")
        assert "Max-Age=1" in exchanged.headers["set-cookie"]
        cookie = browser.cookies[SESSION_COOKIE]

    async def expired() -> bool:
        return await _status_with(app, cookie) == 401

    await wait_until_async(expired, timeout=20, what="the session to expire")


def test_bad_host_and_lifetime_options_are_usage_errors(pg_dsn: str, schema: str) -> None:
    cli = Cli(pg_dsn, schema)
    bad_host = cli("dashboard", "--allow-host", "dash.example,http://evil.example")
    assert bad_host.exit_code == 2 and bad_host.stderr.startswith(
        "portqueue: error: --allow-host: 'http://evil.example' is not a host name"), bad_host.stderr
    for lifetime in ["0", str(31 * 24 * 3600)]:
        bad_lifetime = cli("dashboard", "--token", TOKEN, "--session-lifetime", lifetime)
        assert bad_lifetime.exit_code == 2
        assert bad_lifetime.stderr.startswith("portqueue: error: --session-lifetime: must be")
