"""`portqueue job` and `portqueue jobs`: reading jobs from the command line."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from portqueue import JobSnapshot, JobStatus, PortQueue
from tests.support.cli import Cli
from tests.support.waiting import wait_until
from tests.support.workers import SyncHarness


@pytest.fixture
def cli(pg_dsn: str, schema: str) -> Cli:
    return Cli(pg_dsn, schema)


def test_job_json_is_the_snapshot(cli: Cli, pq: PortQueue) -> None:
    job_id = pq.add_job(queue="emails", data={"to": "a@example.com"}, group_id="g").job_id
    assert job_id is not None
    out = cli.json("job", job_id)
    assert set(out) == {field.name for field in dataclasses.fields(JobSnapshot)}
    assert (out["job_id"], out["queue"], out["status"], out["data"], out["group_id"]) == (
        job_id, "emails", "pending", {"to": "a@example.com"}, "g")
    assert out["created_at"].endswith("+00:00") and out["errors"] == []
    assert out["retry"]["backoff"]["strategy"] == "fixed"


def test_job_table_shows_data_as_written(cli: Cli, pq: PortQueue) -> None:
    # Markup and emoji codes in data are printed as they are, not rendered.
    job_id = pq.add_job(queue="emails", data={"note": "[bold]x[/bold] :smile:"}).job_id
    assert job_id is not None
    result = cli("job", job_id)
    assert result.exit_code == 0, result.output
    assert "pending" in result.stdout and "0 of 1" in result.stdout
    assert '"[bold]x[/bold] :smile:"' in result.stdout


def test_a_failed_job_shows_its_errors(cli: Cli, harness: SyncHarness) -> None:
    pq = harness.pq

    @pq.handler("emails")
    def send(job: Any) -> None:
        raise ValueError(f"mailbox full\nattempt {job.attempt}")

    harness.start()
    job_id = str(pq.add_job(queue="emails", data={}, retry={"max_attempts": 2}).job_id)
    wait_until(lambda: (job := pq.get_job(job_id=job_id)) and job.status is JobStatus.FAILED,
               what="the job to fail twice")
    shown = cli("job", job_id)
    assert shown.exit_code == 0, shown.output
    assert "error (attempt 1)" in shown.stdout and "error (attempt 2)" in shown.stdout
    assert "ValueError: mailbox full" in shown.stdout
    listed = cli("jobs", "emails", "--status", "failed")
    assert "2/2" in listed.stdout and "mailbox full attempt 2" in listed.stdout


def test_unknown_job_exits_1_and_a_bad_id_exits_2(cli: Cli) -> None:
    unknown = cli("job", "0193f0a4-8c1e-7b7a-9d6e-3f1c2a4b5d6e")
    assert unknown.exit_code == 1 and "no job" in unknown.stderr and unknown.stdout == ""
    bad = cli("job", "not-a-uuid")
    assert bad.exit_code == 2 and "JOB_ID:" in bad.stderr


def test_jobs_filters_and_pages_newest_first(cli: Cli, pq: PortQueue) -> None:
    ids = [pq.add_job(queue="emails", data={"n": n}, group_id="even" if n % 2 == 0 else None)
           .job_id for n in range(5)]
    pq.cancel_job(job_id=str(ids[1]))
    out = cli.json("jobs", "emails")
    assert out["total"] == 5 and [item["job_id"] for item in out["items"]] == ids[::-1]
    cancelled = cli.json("jobs", "emails", "--status", "cancelled")
    assert [item["job_id"] for item in cancelled["items"]] == [ids[1]]
    several = cli.json("jobs", "emails", "--status", "pending,cancelled", "--status", "failed")
    assert several["total"] == 5
    grouped = cli.json("jobs", "emails", "--group-id", "even")
    assert grouped["total"] == 3
    page = cli.json("jobs", "emails", "--limit", "2", "--offset", "2")
    assert page["total"] == 5 and [item["job_id"] for item in page["items"]] == ids[2:0:-1]


def test_jobs_table_says_where_the_page_is(cli: Cli, pq: PortQueue) -> None:
    for n in range(3):
        pq.add_job(queue="emails", data={"n": n})
    result = cli("jobs", "emails", "--limit", "2")
    assert result.exit_code == 0, result.output
    assert result.stdout.count("pending") == 2
    assert "1-2 of 3 job(s) in 'emails'; --offset 2 for more" in result.stdout
    empty = cli("jobs", "nothing-here")
    assert empty.exit_code == 0 and "none of 0 job(s)" in empty.stdout


@pytest.mark.parametrize(
    ("args", "named"),
    [(["--status", "bogus"], "--status: unknown status 'bogus'"),
     (["--limit", "0"], "--limit:"),
     (["--limit", "501"], "--limit:"),
     (["--offset", "-1"], "--offset:")],
)
def test_jobs_bad_input(cli: Cli, args: list[str], named: str) -> None:
    result = cli("jobs", "emails", *args)
    assert result.exit_code == 2 and named in result.stderr
