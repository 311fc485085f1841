"""The `waiting` status on the command line (issue 20): `portqueue stats`
counts a queue's waiting jobs, `portqueue jobs --status waiting` lists them."""

from __future__ import annotations

import pytest

from portqueue import PortQueue
from tests.support.cli import Cli


@pytest.fixture
def cli(pg_dsn: str, schema: str) -> Cli:
    return Cli(pg_dsn, schema)


def test_stats_and_jobs_show_waiting_jobs(cli: Cli, pq: PortQueue) -> None:
    parent = pq.add_job(queue="etl", data=1).job_id
    assert parent is not None
    children = [pq.add_job(queue="etl", data=n, depends_on=[parent]).job_id for n in range(2)]

    (stats,) = cli.json("stats", "etl")
    assert stats["counts"]["waiting"] == 2 and stats["counts"]["pending"] == 1
    table = cli("stats", "etl")
    assert table.exit_code == 0, table.output
    assert "waiting" in table.stdout.splitlines()[0]
    listed = cli.json("jobs", "etl", "--status", "waiting")
    assert sorted(item["job_id"] for item in listed["items"]) == sorted(children)
