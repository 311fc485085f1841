"""`portqueue stats`, `queues`, `schedules`, `pause` and `resume`."""

from __future__ import annotations

import pytest

from portqueue import JobStatus, PauseMode, PortQueue
from tests.support.cli import Cli


@pytest.fixture
def cli(pg_dsn: str, schema: str) -> Cli:
    return Cli(pg_dsn, schema)


def test_stats_of_every_queue_and_of_one(cli: Cli, pq: PortQueue) -> None:
    pq.add_jobs(queue="emails", jobs=[{"data": 1}, {"data": 2}])
    cancelled = pq.add_job(queue="reports", data={}).job_id
    pq.cancel_job(job_id=str(cancelled))
    every = cli.json("stats")
    assert [row["queue"] for row in every] == ["emails", "reports"]
    emails, reports = every
    assert set(emails["counts"]) == {status.value for status in JobStatus}
    assert emails["counts"]["pending"] == 2 and emails["paused"] is None
    assert emails["oldest_pending_seconds"] >= 0
    assert reports["counts"]["cancelled"] == 1 and reports["oldest_pending_seconds"] is None
    assert cli.json("stats", "reports") == [reports]

    table = cli("stats")
    assert table.exit_code == 0, table.output
    header, first, second = table.stdout.splitlines()
    assert header.split()[:7] == ["queue", "pending", "active", "completed", "failed",
                                  "cancelled", "expired"]
    assert first.split()[:2] == ["emails", "2"] and second.split()[5] == "1"


def test_stats_of_a_bad_queue_name(cli: Cli) -> None:
    result = cli("stats", "x" * 129)
    assert result.exit_code == 2 and "QUEUE:" in result.stderr


def test_pause_and_resume(cli: Cli, pq: PortQueue) -> None:
    paused = cli.json("pause", "emails", "--mode", "all")
    assert (paused["queue"], paused["paused"]) == ("emails", "all")
    assert pq.get_queue_stats(queue="emails").paused is PauseMode.ALL
    assert cli("add", "emails").exit_code == 1, "mode all refuses adds"
    human = cli("pause", "emails")
    assert human.exit_code == 0
    assert human.stdout == ("paused 'emails' (processing): workers stop claiming, "
                            "adds are accepted\n")
    resumed = cli("resume", "emails")
    assert resumed.exit_code == 0 and resumed.stdout == "resumed 'emails'\n"
    assert pq.get_queue_stats(queue="emails").paused is None
    assert cli.json("resume", "emails")["paused"] is None
    bad = cli("pause", "emails", "--mode", "sometimes")
    assert bad.exit_code == 2 and "--mode" in bad.stderr


def test_queues_pages(cli: Cli, pq: PortQueue) -> None:
    for queue in ("a", "b", "c"):
        pq.add_job(queue=queue, data={})
    pq.pause_queue(queue="b")
    out = cli.json("queues")
    assert out["total"] == 3
    assert {item["queue"]: item["paused"] for item in out["items"]} == {
        "a": None, "b": "processing", "c": None}
    assert set(out["items"][0]) >= {"queue", "paused", "created_at", "concurrency", "retry",
                                    "retention", "lease_seconds", "dead_letter_queue"}
    assert len(cli.json("queues", "--limit", "2")["items"]) == 2
    table = cli("queues", "--limit", "1", "--offset", "1")
    assert table.exit_code == 0 and "1 of 3 queue(s)" in table.stdout


def test_schedules_filter(cli: Cli, pq: PortQueue) -> None:
    every = pq.add_job(queue="pings", data={}, schedule={"start_every_seconds": 30})
    pq.add_job(queue="reports", data={}, schedule={"cron": "0 8 * * *"})
    out = cli.json("schedules", "--queue", "pings")
    assert out["total"] == 1
    (item,) = out["items"]
    assert (item["schedule_id"], item["every_seconds"], item["enabled"]) == (
        every.schedule_id, 30, True)
    assert cli.json("schedules")["total"] == 2
    assert cli.json("schedules", "--disabled")["total"] == 0
    table = cli("schedules")
    assert table.exit_code == 0
    assert "0 8 * * *" in table.stdout and "30s" in table.stdout
