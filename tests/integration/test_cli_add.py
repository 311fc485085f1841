"""`portqueue add`: one job, a recurring schedule, or a JSON-lines file in batches."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from portqueue import JobStatus, PauseMode, PortQueue
from tests.migrations.conftest import cli_command, cli_env
from tests.support.cli import Cli, run_on_terminal
from tests.support.rows import count_jobs

Db = psycopg.Connection[Any]


@pytest.fixture
def cli(pg_dsn: str, schema: str) -> Cli:
    return Cli(pg_dsn, schema)


@pytest.fixture(autouse=True)
def known_queues(schema: str, db: Db) -> None:
    """The queues these tests add to exist, as a worker's start would have
    made them: add refuses an unknown queue (tests/integration/test_remove_queue.py)."""
    query = sql.SQL("INSERT INTO {} (name) VALUES ('emails'), ('reports'), ('bulk')").format(
        sql.Identifier(schema, "queue"))
    db.execute(query)


def test_add_prints_the_new_job(cli: Cli, pq: PortQueue) -> None:
    result = cli("add", "emails", '{"to": "a@example.com"}', "--priority", "5")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("added job ") and "'emails' (pending" in result.stdout
    job_id = result.stdout.split()[2]
    job = pq.get_job(job_id=job_id)
    assert job is not None
    assert (job.queue, job.data, job.priority) == ("emails", {"to": "a@example.com"}, 5)


def test_add_json_is_the_add_result(cli: Cli, pq: PortQueue) -> None:
    out = cli.json("add", "emails")
    assert set(out) == {"job_id", "queue", "status", "start_after", "deduplicated",
                        "deduplication_reason", "schedule_id", "next_run_at", "created_at"}
    assert (out["queue"], out["status"], out["deduplicated"]) == ("emails", "pending", False)
    job = pq.get_job(job_id=out["job_id"])
    assert job is not None and job.data == {}, "DATA defaults to {}"


def test_every_option_reaches_the_job(cli: Cli, pq: PortQueue) -> None:
    out = cli.json("add", "emails", "[1, 2]", "--delay", "3600", "--max-attempts", "3",
                   "--retry-delay", "2", "--backoff", "exponential", "--expire-in", "60",
                   "--timeout", "30", "--retention-ttl", "100", "--idempotency-key", "k1",
                   "--group-id", "g1")
    job = pq.get_job(job_id=out["job_id"])
    assert job is not None
    assert job.data == [1, 2]
    assert (job.retry.max_attempts, job.retry.delay_seconds) == (3, 2)
    assert job.retry.backoff.strategy.value == "exponential"
    assert (job.timeout_seconds, job.retention_ttl_seconds) == (30, 100)
    assert (job.idempotency_key, job.group_id) == ("k1", "g1")
    assert job.expire_at is not None and job.start_after > job.created_at

    again = cli.json("add", "emails", "{}", "--idempotency-key", "k1")
    assert again["job_id"] == out["job_id"]
    assert (again["deduplicated"], again["deduplication_reason"]) == (True, "IDEMPOTENCY")
    human = cli("add", "emails", "{}", "--idempotency-key", "k1")
    assert human.exit_code == 0 and human.stdout.startswith("not added: job ")


def test_cron_add_stores_a_schedule(cli: Cli, db: Db, schema: str) -> None:
    out = cli.json("add", "reports", '{"kind": "daily"}', "--cron", "0 8 * * 1-5",
                   "--tz", "Europe/Paris")
    assert out["job_id"] is None and out["schedule_id"] and out["next_run_at"]
    schedules = cli.json("schedules", "--queue", "reports")
    assert schedules["total"] == 1
    (item,) = schedules["items"]
    assert (item["schedule_id"], item["cron"], item["tz"]) == (
        out["schedule_id"], "0 8 * * 1-5", "Europe/Paris")
    assert count_jobs(db, schema) == 0


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["{not json"], "DATA: not valid JSON"),
        (["{}", "--priority", "99999999999"], "--priority:"),
        (["{}", "--delay", "5", "--every", "10"], "--delay/--every/--cron:"),
        (["{}", "--tz", "UTC"], "--tz: goes with --cron"),
        (["{}", "--cron", "61 * * * *"], "--cron"),
        (["{}", "--cron", "* * * * *", "--tz", "Mars/Olympus"], "--tz:"),
        (["{}", "--max-attempts", "0"], "--max-attempts:"),
        (["{}", "--backoff", "cubic"], "--backoff"),
        (["{}", "--expire-in", "0"], "--expire-in:"),
        (["{}", "--preferred-instance-key-pattern", "ram.*"], "--preferred-instance-key"),
        (["{}", "--file", "jobs.jsonl"], "DATA and --file"),
        (["--file", "jobs.jsonl", "--every", "60"], "--every/--cron: a file adds one-off"),
    ],
    ids=["json", "priority", "two-modes", "tz-alone", "cron", "tz", "attempts", "backoff",
         "expire", "pattern-without-key", "data-and-file", "recurring-file"],
)
def test_bad_input_is_a_usage_error_and_writes_nothing(
    cli: Cli, db: Db, schema: str, args: list[str], named: str
) -> None:
    result = cli("add", "emails", *args)
    assert result.exit_code == 2, result.output
    assert named in result.stderr
    assert result.stdout == ""
    assert count_jobs(db, schema) == 0


def test_empty_queue_name_is_named(cli: Cli) -> None:
    result = cli("add", "", "{}")
    assert result.exit_code == 2 and "QUEUE:" in result.stderr


def test_a_queue_paused_for_adds_exits_1(cli: Cli, pq: PortQueue, db: Db, schema: str) -> None:
    pq.pause_queue(queue="emails", mode=PauseMode.ALL)
    result = cli("add", "emails", "{}")
    assert result.exit_code == 1 and "paused" in result.stderr
    assert count_jobs(db, schema) == 0


def _lines(count: int, bad_line: int | None = None, bad: str = "") -> str:
    lines = [json.dumps({"data": {"n": n}, **({"priority": 7} if n == 2 else {})})
             for n in range(1, count + 1)]
    if bad_line is not None:
        lines[bad_line - 1] = bad
    return "\n".join(lines) + "\n"


def test_file_adds_every_line_in_batches(cli: Cli, pq: PortQueue, tmp_path: Path) -> None:
    path = tmp_path / "jobs.jsonl"
    path.write_text(_lines(1200).replace("\n", "\n\n", 3))  # blank lines are skipped
    out = cli.json("add", "bulk", "--file", str(path), "--batch-size", "500",
                   "--group-id", "import-1")
    assert (out["queue"], out["lines"], out["added"], out["deduplicated"]) == (
        "bulk", 1200, 1200, 0)
    assert len(set(out["job_ids"])) == 1200
    page = pq.get_jobs(queue="bulk", group_id="import-1", limit=1)
    assert page.total == 1200, "the flags are every line's defaults"
    second = pq.get_job(job_id=out["job_ids"][1])
    assert second is not None and (second.data, second.priority) == ({"n": 2}, 7)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("{oops", "--file line 1100: not valid JSON"),
        ("[1, 2]", "--file line 1100: must be a JSON object"),
        ('{"data": 1, "priority": "high"}', "--file line 1100: priority:"),
        ('{"priority": 1}', "--file line 1100: data: is required"),
        ('{"data": 1, "schedule": {"cron": "* * * * *"}}', "--file line 1100:"),
    ],
    ids=["json", "not-object", "priority", "no-data", "recurring"],
)
def test_a_bad_line_adds_nothing_at_all(
    cli: Cli, db: Db, schema: str, tmp_path: Path, bad: str, message: str
) -> None:
    # Line 1100 is in the third batch: the first two were already inserted.
    path = tmp_path / "jobs.jsonl"
    path.write_text(_lines(1200, bad_line=1100, bad=bad))
    result = cli("add", "bulk", "--file", str(path), "--batch-size", "500")
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert count_jobs(db, schema) == 0


def test_file_from_stdin(cli: Cli, pq: PortQueue) -> None:
    result = cli("add", "bulk", "--file", "-", input=_lines(3))
    assert result.exit_code == 0, result.output
    assert "added 3 job(s) to 'bulk' from 3 line(s)" in result.stdout
    assert pq.get_queue_stats(queue="bulk").counts[JobStatus.PENDING] == 3


def test_a_missing_or_binary_file_is_a_usage_error(
    cli: Cli, db: Db, schema: str, tmp_path: Path
) -> None:
    result = cli("add", "bulk", "--file", str(tmp_path / "nowhere.jsonl"))
    assert result.exit_code == 2 and "--file: cannot read" in result.stderr
    binary = tmp_path / "jobs.jsonl"
    binary.write_bytes(_lines(2).encode() + b"\xff\xfe\n")
    result = cli("add", "bulk", "--file", str(binary))
    assert result.exit_code == 2 and "--file: not UTF-8 text" in result.stderr
    assert count_jobs(db, schema) == 0


def test_file_shows_a_progress_bar_on_a_terminal(
    pg_dsn: str, schema: str, pq: PortQueue, tmp_path: Path
) -> None:
    path = tmp_path / "jobs.jsonl"
    path.write_text(_lines(3000))
    env = cli_env(PORTQUEUE_DSN=pg_dsn, PORTQUEUE_SCHEMA=schema, TERM="xterm", COLUMNS="120")
    code, stdout, terminal = run_on_terminal(
        [*cli_command(), "add", "bulk", "--file", str(path)], env)
    assert code == 0, terminal
    assert "added 3000 job(s)" in stdout
    assert "adding to bulk" in terminal and "3000/3000" in terminal
    assert pq.get_queue_stats(queue="bulk").counts[JobStatus.PENDING] == 3000

    # --json is for scripts: no bar, even on a terminal.
    path.write_text(_lines(3))
    code, stdout, terminal = run_on_terminal(
        [*cli_command(), "add", "bulk", "--file", str(path), "--json"], env)
    assert code == 0 and json.loads(stdout)["added"] == 3
    assert terminal == ""
