"""`portqueue flow ID`: a flow from the command line (table and --json)."""

from __future__ import annotations

import pytest

from portqueue import PortQueue
from tests.support.cli import Cli


@pytest.fixture
def cli(pg_dsn: str, schema: str) -> Cli:
    return Cli(pg_dsn, schema)


def test_flow_shows_each_job_with_the_keys_it_waits_for(cli: Cli, pq: PortQueue) -> None:
    flow = pq.add_flow(jobs=[
        {"key": "extract", "queue": "etl", "data": 1},
        {"key": "load", "queue": "etl", "data": 2, "depends_on": ["extract"]},
    ])
    result = cli("flow", flow.flow_id)
    assert result.exit_code == 0, result.output
    assert f"flow {flow.flow_id}: running" in result.stdout
    load = next(line for line in result.stdout.splitlines() if line.startswith("load"))
    assert "waiting" in load and "extract" in load
    out = cli.json("flow", flow.flow_id)
    assert out["status"] == "running" and list(out["jobs"]) == ["extract", "load"]
    assert out["jobs"]["load"]["depends_on"] == [flow.jobs["extract"].job_id]


def test_an_unknown_flow_exits_1(cli: Cli) -> None:
    result = cli("flow", "018f0000-0000-7000-8000-000000000000")
    assert result.exit_code == 1
    assert "no flow" in result.output
