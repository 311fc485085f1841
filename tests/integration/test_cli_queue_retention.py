"""``portqueue queues`` shows a queue's retention per outcome (issue 18,
item 13): the ttls of completed and of failed jobs, keep-forever, count caps,
in the table and in --json, as a worker declared them."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from portqueue import FOREVER
from tests.support.cli import Cli
from tests.support.workers import SyncHarness

Db = psycopg.Connection[Any]


@pytest.fixture
def cli(pg_dsn: str, schema: str) -> Cli:
    return Cli(pg_dsn, schema)


def test_queues_shows_the_retention_a_worker_declared(cli: Cli, harness: SyncHarness) -> None:
    pq = harness.pq
    pq.create_queue(queue="kept", handler=lambda job: None,
                    retention={"completed_ttl_seconds": 60, "failed_ttl_seconds": FOREVER,
                               "keep_failed": 3})
    pq.create_queue(queue="uncapped", handler=lambda job: None,
                    retention={"ttl_seconds": 600, "keep_completed": FOREVER})
    harness.start()  # writes the declared options to the queue rows

    (item,) = [i for i in cli.json("queues")["items"] if i["queue"] == "kept"]
    assert item["retention"] == {"ttl_seconds": None, "keep_completed": None, "keep_failed": 3,
                                 "completed_ttl_seconds": 60, "failed_ttl_seconds": FOREVER}
    table = cli("queues", env={"COLUMNS": "250"})
    assert table.exit_code == 0, table.output
    assert "completed 60s, failed forever, keep 3 failed" in table.stdout
    assert "600s, keep all completed" in table.stdout
