"""`portqueue workers` and `portqueue failures`: across queues, table and --json."""

from __future__ import annotations

import os
import socket
import threading
from typing import Any

import psycopg
import pytest

from portqueue import PortQueue
from tests.dashboard.conftest import fail_job
from tests.dashboard.failure_rows import add_failed
from tests.dashboard.worker_rows import insert_worker
from tests.support.cli import Cli
from tests.support.waiting import wait_until

Db = psycopg.Connection[Any]


@pytest.fixture
def cli(pg_dsn: str, schema: str) -> Cli:
    return Cli(pg_dsn, schema)


def test_workers_json_and_table(cli: Cli, db: Db, schema: str) -> None:
    second = insert_worker(db, schema, hostname="host-b", pid=20, queues=["reports"],
                           concurrency=5, instance_key="eu-1")
    first = insert_worker(db, schema, hostname="host-a", pid=10, queues=["emails", "sms"],
                          concurrency=5, instance_key="eu-1")
    page = cli.json("workers")
    assert page["total"] == 2
    assert [w["worker_id"] for w in page["items"]] == [first, second]
    a = page["items"][0]
    assert (a["hostname"], a["pid"], a["queues"], a["concurrency"], a["running"],
            a["instance_key"]) == ("host-a", 10, ["emails", "sms"], 5, 0, "eu-1")
    assert 0 <= a["seen_seconds_ago"] < 60

    table = cli("workers")
    assert table.exit_code == 0, table.output
    header, row_a, row_b, footer = table.stdout.splitlines()
    assert header.split()[:5] == ["host", "pid", "queues", "concurrency", "running"]
    assert row_a.split()[:5] == ["host-a", "10", "emails,sms", "5", "0"]
    assert row_b.split()[:3] == ["host-b", "20", "reports"]
    assert footer == "1-2 of 2 worker(s)"
    assert cli.json("workers", "--limit", "1", "--offset", "1")["items"][0]["worker_id"] == second


def test_workers_when_none_and_bad_limit(cli: Cli) -> None:
    assert cli.json("workers") == {"items": [], "total": 0}
    assert cli("workers").stdout.splitlines()[-1] == "none of 0 worker(s)"
    assert cli("workers", "--limit", "0").exit_code == 2


def test_failures_across_queues_json_and_table(
    cli: Cli, pq: PortQueue, db: Db, schema: str, pg_dsn: str,
) -> None:
    real = fail_job(pg_dsn, schema, queue="emails", data={"to": "a@b"},
                    message="SMTP 554:\n mailbox unavailable")
    later = add_failed(pq, db, schema, queue="reports", count=2, message="no template")
    pq.add_job(queue="reports", data="pending, not listed")
    page = cli.json("failures")
    assert page["total"] == 3
    assert [item["job_id"] for item in page["items"]] == [*later[::-1], real.job_id]
    assert [item["error"] for item in page["items"]] == [
        "no template 1", "no template 0", "SMTP 554:\n mailbox unavailable"]
    assert page["items"][2]["queue"] == "emails" and page["items"][2]["status"] == "failed"
    only = cli.json("failures", "--queue", "emails", "--limit", "5")
    assert [item["job_id"] for item in only["items"]] == [real.job_id]

    table = cli("failures")
    assert table.exit_code == 0, table.output
    header, *rows, footer = table.stdout.splitlines()
    assert header.split() == ["failed", "at", "queue", "job", "id", "attempt", "error"]
    assert rows[0].split()[2:5] == ["reports", later[1], "1/1"]
    assert rows[2].split()[2:] == ["emails", real.job_id, "1/1", "RuntimeError:", "SMTP",
                                   "554:", "mailbox", "unavailable"]
    assert footer == "1-3 of 3 failed job(s)"
    assert cli("failures", "--limit", "1").stdout.splitlines()[-1] == (
        "1-1 of 3 failed job(s); --offset 1 for more")


def test_failures_when_none_and_bad_queue(cli: Cli) -> None:
    assert cli.json("failures") == {"items": [], "total": 0}
    bad = cli("failures", "--queue", "q" * 129)
    assert bad.exit_code == 2 and "--queue" in bad.stderr


def test_workers_counts_a_real_workers_running_jobs(cli: Cli, pg_dsn: str, schema: str) -> None:
    release = threading.Event()
    started: list[int] = []

    def holds(job: Any) -> None:
        started.append(1)
        release.wait(20)

    with PortQueue(pg_dsn, schema=schema) as worker:
        worker.create_queue(queue="reports", handler=holds, concurrency=3)
        worker.start(maintenance=False, scheduler=False, poll_interval=0.2)
        try:
            worker.add_jobs(queue="reports", jobs=[{"data": n} for n in range(2)])
            wait_until(lambda: len(started) == 2, timeout=15, what="two jobs to start")
            (row,) = cli.json("workers")["items"]
            assert (row["hostname"], row["pid"]) == (socket.gethostname(), os.getpid())
            assert (row["queues"], row["concurrency"], row["running"]) == (["reports"], 3, 2)
        finally:
            release.set()
            worker.stop()
    assert cli.json("workers")["total"] == 0  # a stopped worker unregisters
