"""A DSN's password never shows: not in the CLI's stdout or stderr, not in a
worker's log records, not in exception messages, not in ``repr(client)``.

Every DSN here carries PASSWORD. The test servers trust local connections, so
the password is ignored where the server is reachable; an unreachable port and
a malformed DSN make the code paths that report errors run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import subprocess
import traceback
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from portqueue import AsyncPortQueue, PortQueue
from portqueue.maintenance import run_pass
from portqueue.migrate import migrate
from tests.migrations.conftest import cli_command, cli_env
from tests.support.ports import free_port as closed_port
from tests.support.waiting import wait_until, wait_until_async

PASSWORD = "Pw-Secret-7f3a9c"
ROOT = Path(__file__).resolve().parents[2]


def with_password(dsn: str, **overrides: Any) -> str:
    return make_conninfo(dsn, password=PASSWORD, **overrides)


def unreachable(dsn: str) -> str:
    return with_password(dsn, host="127.0.0.1", port=str(closed_port()), connect_timeout="2")


def malformed() -> str:
    # libpq quotes a bad percent-escape token whole: here, the password.
    return f"postgresql://postgres:{PASSWORD}%zz@127.0.0.1:5432/postgres"


def assert_hidden(*texts: object) -> None:
    for text in texts:
        assert PASSWORD not in str(text), f"the password leaked: {str(text)[:500]}"


def error_text(error: BaseException) -> str:
    """Everything a traceback of ``error`` would print, chained causes included."""
    return "".join(traceback.format_exception(error))


def test_the_malformed_dsn_really_makes_libpq_quote_the_password() -> None:
    # Why the library refuses a malformed DSN itself: psycopg's own error
    # quotes the password, and a pool would log it on every retry.
    with pytest.raises(psycopg.ProgrammingError) as info:
        conninfo_to_dict(malformed())
    assert PASSWORD in str(info.value)


@pytest.mark.parametrize("client_class", [PortQueue, AsyncPortQueue])
def test_a_malformed_dsn_is_refused_without_quoting_it(client_class: type[Any]) -> None:
    with pytest.raises(ValueError, match=r"^dsn: ") as info:
        client_class(malformed())
    assert_hidden(error_text(info.value))


def test_clients_keep_the_dsn_out_of_their_repr(pg_dsn: str, schema: str) -> None:
    dsn = with_password(pg_dsn)
    with PortQueue(dsn, schema=schema) as client:
        client.get_queues()  # a used client: its pool exists
        assert_hidden(repr(client), repr(vars(client)))
    assert_hidden(repr(AsyncPortQueue(dsn, schema=schema)))


def test_errors_from_an_unreachable_server_name_no_password(pg_dsn: str) -> None:
    dsn = unreachable(pg_dsn)
    with pytest.raises(Exception) as migrating:
        migrate(dsn, schema="pq_secret")
    assert_hidden(error_text(migrating.value))
    with pytest.raises(ValueError) as passing:
        run_pass(malformed(), schema="pq_secret")
    assert_hidden(error_text(passing.value))


async def test_a_worker_that_cannot_connect_logs_no_password(
    pg_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    client = AsyncPortQueue(unreachable(pg_dsn), schema="pq_secret")

    @client.handler("secrets")
    async def handle(job: Any) -> None:
        return None

    def warnings() -> int:
        return len([r for r in caplog.records if r.levelno >= logging.WARNING])

    # start() keeps retrying the pool for 30 s; the warnings come long before.
    starting = asyncio.ensure_future(
        client.start(poll_interval=0.2, maintenance=False, scheduler=False))
    try:
        await wait_until_async(lambda: warnings() >= 2 or starting.done(), timeout=20,
                               what="the worker's connection warnings")
    finally:
        starting.cancel()
        with contextlib.suppress(BaseException):
            await starting
        await client.stop(abort=True)
        await client.aclose()
    assert warnings() >= 2
    for record in caplog.records:
        assert_hidden(logging.Formatter().format(record), record.args)


# --- the CLI ---


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*cli_command(), *args], env=cli_env(), cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, check=False)


@pytest.mark.slow
def test_cli_commands_that_work_print_no_password(pg_dsn: str, db: psycopg.Connection[Any]) -> None:
    dsn = with_password(pg_dsn)
    schema = ["--dsn", dsn, "--schema", "pq_secret"]
    try:
        for args in (["migrate"], ["add", "secrets", '{"n": 1}'], ["jobs", "secrets"],
                     ["prune"]):
            done = run_cli(*args, *schema)
            assert done.returncode == 0, (args, done.stdout, done.stderr)
            assert_hidden(done.stdout, done.stderr)
            if args == ["migrate"]:  # the queue add takes exists, as a worker would make it
                db.execute("INSERT INTO pq_secret.queue (name) VALUES ('secrets')")
    finally:
        db.execute("DROP SCHEMA IF EXISTS pq_secret CASCADE")


@pytest.mark.slow
def test_cli_errors_print_no_password(pg_dsn: str) -> None:
    cases = [(["migrate", "--dsn", unreachable(pg_dsn)], 1),
             (["stats", "--dsn", unreachable(pg_dsn)], 1),
             (["stats", "--dsn", malformed()], 2)]
    for args, code in cases:
        done = run_cli(*args)
        assert done.returncode == code, (args, done.stdout, done.stderr)
        assert done.stderr.strip(), "an error must say something"
        assert_hidden(done.stdout, done.stderr)


@pytest.mark.slow
def test_cli_worker_retrying_an_unreachable_server_prints_no_password(
    pg_dsn: str, tmp_path: Path
) -> None:
    log = tmp_path / "worker.log"
    env = cli_env(PORTQUEUE_DSN=with_password(pg_dsn))
    with log.open("w") as out:
        worker = subprocess.Popen(
            [*cli_command(), "worker", "tests.security.app:pq", "--dsn", unreachable(pg_dsn)],
            env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, text=True)
    try:
        wait_until(lambda: worker.poll() is not None or log.read_text().count("\n") >= 2,
                   timeout=30, what="the worker to report its connection failures")
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGINT)
            try:
                worker.wait(timeout=15)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
    output = log.read_text()
    assert output.strip(), "the worker said nothing about failing to connect"
    assert_hidden(output)


def test_assert_hidden_can_fail() -> None:
    with pytest.raises(AssertionError):
        assert_hidden(f"connection to {PASSWORD}")
