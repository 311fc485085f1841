"""SPEC §10, the pytest plugin: a user's test file, run by pytest in a
subprocess with PORTQUEUE_TEST_DSN set, gets portqueue_dsn, pq and apq on a
migrated schema that each test starts empty and that is dropped at the end."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import psycopg
import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # each test runs pytest in a subprocess

USER_TESTS = '''
import pytest
from portqueue import AsyncPortQueue, PortQueue, Snooze
from portqueue.testing import assert_enqueued, refute_enqueued

pytest_plugins = ["portqueue.testing.pytest_plugin"]


def test_dsn(portqueue_dsn):
    assert portqueue_dsn == "{dsn}"


@pytest.mark.parametrize("round", [1, 2])
def test_each_test_starts_empty(pq, round):
    assert isinstance(pq, PortQueue)
    refute_enqueued(pq, queue="signup")

    @pq.task(queue="signup")
    def welcome(email: str) -> str:
        return email

    welcome.add(email="a@b.com")
    assert_enqueued(pq, queue="signup", data={{"email": "a@b.com"}})
    assert pq.drain().completed == 1
    refute_enqueued(pq, queue="signup")


def test_snooze(pq):
    @pq.task(queue="later")
    def later() -> None:
        raise Snooze(seconds=60)

    later.add()
    assert pq.drain().snoozed == 1
    assert_enqueued(pq, queue="later")


async def test_async(apq):
    assert isinstance(apq, AsyncPortQueue)

    @apq.task(queue="async-signup")
    async def welcome(email: str) -> None: ...

    await welcome.add(email="x")
    assert (await apq.drain()).completed == 1


def test_hundred_jobs(pq):
    import time

    @pq.task(queue="bulk")
    def noop(n: int) -> None: ...

    started = time.perf_counter()
    for n in range(100):
        noop.add(n=n)
    result = pq.drain()
    elapsed = time.perf_counter() - started
    assert result.completed == 100
    print(f"HUNDRED_JOBS_SECONDS={{elapsed:.3f}}")
'''


def _run_user_tests(tmp_path: Path, dsn: str, *extra: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_user_code.py").write_text(USER_TESTS.format(dsn=dsn), encoding="utf-8")
    env = {**os.environ, "PORTQUEUE_TEST_DSN": dsn, "PYTHONPATH": str(ROOT)}
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
         "-o", "asyncio_mode=auto", "--rootdir", str(tmp_path), *extra, str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def test_a_users_tests_run_with_the_plugin(tmp_path: Path, pg_server_dsn: str,
                                           db: psycopg.Connection[Any]) -> None:
    done = _run_user_tests(tmp_path, pg_server_dsn, "--durations=0")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "6 passed" in done.stdout, done.stdout
    seconds = float(re.search(r"HUNDRED_JOBS_SECONDS=([\d.]+)", done.stdout).group(1))
    assert seconds > 0
    # The run's schema was dropped at its end.
    with psycopg.connect(pg_server_dsn, autocommit=True) as conn:
        left = conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname LIKE "
                            "'portqueue\\_test\\_main\\_%%'").fetchone()[0]
    assert left == 0


def test_a_failing_user_test_reports_what_is_enqueued(tmp_path: Path, pg_server_dsn: str) -> None:
    (tmp_path / "test_failing.py").write_text(textwrap.dedent('''
        from portqueue.testing import assert_enqueued
        pytest_plugins = ["portqueue.testing.pytest_plugin"]

        def test_missing(pq):
            pq.add_job(queue="emails", data={"to": "a"})
            assert_enqueued(pq, queue="emails", data={"to": "b"})
    '''), encoding="utf-8")
    env = {**os.environ, "PORTQUEUE_TEST_DSN": pg_server_dsn, "PYTHONPATH": str(ROOT)}
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("PYTEST_ADDOPTS", None)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir",
         str(tmp_path), str(tmp_path / "test_failing.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert "no job enqueued on 'emails' matches data containing {'to': 'b'}" in done.stdout
