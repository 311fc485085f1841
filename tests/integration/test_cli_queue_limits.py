"""`portqueue queues` shows each queue's flow-control limits (SPEC §8)."""

from __future__ import annotations

import pytest

from portqueue import PortQueue
from tests.support.cli import Cli


@pytest.fixture
def cli(pg_dsn: str, schema: str) -> Cli:
    return Cli(pg_dsn, schema)


def test_queues_lists_the_flow_control_limits(cli: Cli, pq: PortQueue) -> None:
    pq.set_queue_limits(queue="limited", global_concurrency=5,
                        rate_limit={"limit": 10, "period_seconds": 60})
    pq.add_job(queue="plain", data=1)
    listed = cli.json("queues")
    by_name = {row["queue"]: row for row in listed["items"]}
    assert by_name["limited"]["global_concurrency"] == 5
    assert by_name["limited"]["rate_limit"] == {
        "limit": 10, "period_seconds": 60, "per_partition": False}
    assert by_name["plain"]["rate_limit"] is None
    table = cli("queues")
    assert table.exit_code == 0, table.output
    assert "global 5, 10/60s" in table.stdout
