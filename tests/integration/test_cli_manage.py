"""`portqueue retry`, `cancel` and `remove`: by id, and by filter a page at a time."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import pytest
from psycopg import sql

from portqueue import JobStatus, PortQueue
from tests.migrations.conftest import cli_command, cli_env
from tests.support.cli import Cli, run_on_terminal
from tests.support.rows import count_jobs
from tests.support.waiting import wait_until
from tests.support.workers import SyncHarness

Db = psycopg.Connection[Any]
UNKNOWN = "0193f0a4-8c1e-7b7a-9d6e-3f1c2a4b5d6e"


@pytest.fixture
def cli(pg_dsn: str, schema: str) -> Cli:
    return Cli(pg_dsn, schema)


def _add(pq: PortQueue, count: int, queue: str = "emails", **options: Any) -> list[str]:
    results = pq.add_jobs(queue=queue, jobs=[{"data": {"n": n}, **options} for n in range(count)])
    return [str(result.job_id) for result in results]


def _finish(db: Db, schema: str, job_ids: list[str]) -> None:
    """Cancel jobs in one statement (one by one through the client is slow)."""
    db.execute(sql.SQL("UPDATE {} SET status = 'cancelled', finished_at = now() "
                       "WHERE id = ANY(%s)").format(sql.Identifier(schema, "job")), [job_ids])


def _status(pq: PortQueue, job_id: str) -> JobStatus | None:
    job = pq.get_job(job_id=job_id)
    return None if job is None else job.status


def test_retry_by_id(cli: Cli, pq: PortQueue) -> None:
    (job_id,) = _add(pq, 1)
    pq.cancel_job(job_id=job_id)
    result = cli("retry", job_id)
    assert result.exit_code == 0, result.output
    assert result.stdout == f"{job_id}: retried (pending)\n"
    assert _status(pq, job_id) is JobStatus.PENDING

    pq.cancel_job(job_id=job_id)
    out = cli("retry", job_id, UNKNOWN, "--json")
    assert out.exit_code == 1, "an unknown id is reported and makes the exit 1"
    assert json.loads(out.stdout) == [
        {"job_id": job_id, "retried": True, "status": "pending"},
        {"job_id": UNKNOWN, "retried": False, "status": None}]


def test_one_bad_id_retries_nothing(cli: Cli, pq: PortQueue) -> None:
    (job_id,) = _add(pq, 1)
    pq.cancel_job(job_id=job_id)
    result = cli("retry", job_id, "nope")
    assert result.exit_code == 2 and "JOB_ID: must be a UUID" in result.stderr
    assert _status(pq, job_id) is JobStatus.CANCELLED


def test_cancel_by_id_reports_each_outcome(cli: Cli, pq: PortQueue) -> None:
    first, second = _add(pq, 2)
    done = cli("cancel", first)
    assert done.exit_code == 0 and done.stdout == f"{first}: cancelled\n"
    out = cli("cancel", first, second, UNKNOWN, "--json")
    assert out.exit_code == 1
    assert json.loads(out.stdout) == [
        {"job_id": first, "outcome": "already_finished"},
        {"job_id": second, "outcome": "cancelled"},
        {"job_id": UNKNOWN, "outcome": "not_found"}]


def test_cancel_signals_a_running_job(cli: Cli, harness: SyncHarness) -> None:
    pq = harness.pq

    @pq.handler("long")
    def long(job: Any) -> None:
        job.signal.wait(20)

    harness.start()
    job_id = str(pq.add_job(queue="long", data={}).job_id)
    wait_until(lambda: _status(pq, job_id) is JobStatus.ACTIVE, what="the job to run")
    result = cli("cancel", job_id)
    assert result.exit_code == 0, result.output
    assert result.stdout == f"{job_id}: signalled\n"
    wait_until(lambda: _status(pq, job_id) is JobStatus.CANCELLED, what="the job to stop")


def test_remove_by_id(cli: Cli, pq: PortQueue, db: Db, schema: str) -> None:
    first, second = _add(pq, 2)
    assert cli.json("remove", first) == {"matched": 1, "removed": 1}
    partly = cli("remove", second, UNKNOWN)
    assert partly.exit_code == 1
    assert "removed 1 of 2 job(s) (the others are unknown or active)" in partly.stdout
    assert count_jobs(db, schema) == 0


def test_remove_by_filter_works_through_every_page(
    cli: Cli, pq: PortQueue, db: Db, schema: str
) -> None:
    # 1,100 matching jobs: three pages of at most 500.
    _finish(db, schema, _add(pq, 1100, group_id="old"))
    kept_pending = _add(pq, 3, group_id="old")
    _finish(db, schema, _add(pq, 2, group_id="new"))
    out = cli.json("remove", "--queue", "emails", "--status", "cancelled", "--group-id", "old")
    assert out == {"matched": 1100, "removed": 1100}
    assert count_jobs(db, schema) == 5
    assert {_status(pq, job_id) for job_id in kept_pending} == {JobStatus.PENDING}
    human = cli("remove", "--queue", "emails", "--status", "cancelled")
    assert human.exit_code == 0 and human.stdout == "removed 2 of 2 matching job(s)\n"
    nothing = cli("remove", "--queue", "emails", "--status", "failed")
    assert nothing.exit_code == 0 and "removed 0 of 0" in nothing.stdout


def test_retry_and_cancel_by_filter(cli: Cli, pq: PortQueue) -> None:
    # Paging is remove's test: the three commands share it.
    ids = _add(pq, 30)
    out = cli.json("cancel", "--queue", "emails", "--status", "pending")
    assert out == {"matched": 30, "outcomes": {
        "cancelled": 30, "signalled": 0, "not_found": 0, "already_finished": 0}}
    assert pq.get_queue_stats(queue="emails").counts[JobStatus.CANCELLED] == 30
    assert cli.json("retry", "--queue", "emails", "--status", "cancelled") == {
        "matched": 30, "retried": 30}
    assert {_status(pq, job_id) for job_id in ids} == {JobStatus.PENDING}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["remove"], "pass job ids, or --queue with --status"),
        (["remove", "--queue", "emails"], "pass job ids, or --queue with --status"),
        (["remove", "--queue", "emails", "--status", "active"], "--status: 'active' is not"),
        (["remove", UNKNOWN, "--queue", "emails"], "one or the other"),
        (["retry", "--queue", "emails", "--status", "pending"], "--status: 'pending' is not"),
        (["cancel", "--queue", "emails", "--status", "failed"], "--status: 'failed' is not"),
        (["cancel", "--queue", "emails", "--status", "done"], "--status: unknown status"),
        (["remove", "--queue", "", "--status", "failed"], "--queue:"),
    ],
)
def test_bad_input_is_a_usage_error(
    cli: Cli, pq: PortQueue, db: Db, schema: str, args: list[str], message: str
) -> None:
    _add(pq, 1)
    result = cli(*args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert count_jobs(db, schema) == 1


def test_remove_by_filter_shows_a_progress_bar_on_a_terminal(
    pg_dsn: str, schema: str, pq: PortQueue, db: Db
) -> None:
    _finish(db, schema, _add(pq, 700))
    env = cli_env(PORTQUEUE_DSN=pg_dsn, PORTQUEUE_SCHEMA=schema, TERM="xterm", COLUMNS="120")
    code, stdout, terminal = run_on_terminal(
        [*cli_command(), "remove", "--queue", "emails", "--status", "cancelled"], env)
    assert code == 0, terminal
    assert stdout == "removed 700 of 700 matching job(s)\n"
    assert "removing" in terminal and "700/700" in terminal
    assert count_jobs(db, schema) == 0
