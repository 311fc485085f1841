"""`portqueue workers` and `portqueue failures`: across queues, table and --json."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from tests.dashboard.worker_rows import insert_worker
from tests.support.cli import Cli

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
