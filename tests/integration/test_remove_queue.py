"""Removing a queue (issue 18, item 5): ``remove_queue`` on both clients and
``portqueue remove-queue`` take a queue with no unfinished job, its schedules
and its finished jobs; with pending or active jobs they refuse and remove
nothing. And ``portqueue add`` refuses a queue that does not exist (a typo)
unless ``--create-queue`` asks for it."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from portqueue import PortQueue, QueueNotEmpty
from portqueue.tx import from_psycopg
from tests.conftest import count_jobs
from tests.support.cli import Cli
from tests.support.rows import ACTIVE, count_rows, queue_row, update_job

Db = psycopg.Connection[Any]


@pytest.fixture
def cli(pg_dsn: str, schema: str) -> Cli:
    return Cli(pg_dsn, schema)


def finish(db: Db, schema: str, job_id: str | None) -> None:
    assert job_id is not None
    update_job(db, schema, job_id, "status = 'completed', finished_at = now()")


def test_remove_queue_takes_its_row_schedules_and_finished_jobs(
    client: Any, db: Db, schema: str
) -> None:
    done = client.add_job(queue="emials", data={})
    finish(db, schema, done.job_id)
    client.add_job(queue="emials", data={}, schedule={"start_every_seconds": 60})
    kept = client.add_job(queue="emails", data={})
    assert client.remove_queue(queue="emials") is True
    assert queue_row(db, schema, "emials") is None
    assert count_jobs(db, schema, "queue = 'emials'") == 0
    assert count_rows(db, schema, "schedule", "queue = 'emials'") == 0
    assert client.get_queue(queue="emials") is None
    # Another queue is untouched, and a second removal finds nothing.
    assert client.get_job(job_id=kept.job_id) is not None
    assert client.get_queue(queue="emails").queue == "emails"
    assert client.remove_queue(queue="emials") is False


@pytest.mark.parametrize("status", ["pending", "active"])
def test_remove_queue_refuses_a_queue_with_unfinished_jobs(
    client: Any, db: Db, schema: str, status: str
) -> None:
    waiting = client.add_job(queue="emails", data={})
    done = client.add_job(queue="emails", data={})
    finish(db, schema, done.job_id)
    if status == "active":
        update_job(db, schema, str(waiting.job_id), ACTIVE)
    with pytest.raises(QueueNotEmpty, match="1 unfinished job") as raised:
        client.remove_queue(queue="emails")
    assert (raised.value.queue, raised.value.unfinished) == ("emails", 1)
    assert queue_row(db, schema, "emails") is not None
    assert count_jobs(db, schema, "queue = 'emails'") == 2


def test_remove_queue_checks_its_argument(client: Any) -> None:
    with pytest.raises(ValueError, match="queue"):
        client.remove_queue(queue="")


def test_remove_queue_joins_a_callers_transaction(pq: PortQueue, db: Db, schema: str) -> None:
    pq.add_job(queue="old", data={"n": 1})
    finish(db, schema, pq.get_jobs(queue="old").items[0].job_id)
    with db.transaction(force_rollback=True):
        assert pq.remove_queue(queue="old", tx=from_psycopg(db)) is True
    assert queue_row(db, schema, "old") is not None, "rolled back with the caller's transaction"


def test_cli_remove_queue(cli: Cli, pq: PortQueue, db: Db, schema: str) -> None:
    pq.add_job(queue="busy", data={})
    refused = cli("remove-queue", "busy")
    assert refused.exit_code == 1
    assert "'busy' has 1 unfinished job(s)" in refused.stderr
    assert queue_row(db, schema, "busy") is not None

    pq.pause_queue(queue="idle")  # a queue row with no job
    removed = cli("remove-queue", "idle")
    assert removed.exit_code == 0, removed.output
    assert removed.stdout == "removed queue 'idle', its schedules and its finished jobs\n"
    assert queue_row(db, schema, "idle") is None
    unknown = cli("remove-queue", "idle")
    assert unknown.exit_code == 1 and "no queue 'idle'" in unknown.stderr
    assert cli("remove-queue", "").exit_code == 2


def test_cli_add_refuses_an_unknown_queue_unless_asked_to_create_it(
    cli: Cli, pq: PortQueue, db: Db, schema: str, tmp_path: Any
) -> None:
    pq.add_job(queue="emails", data={})
    typo = cli("add", "emials", '{"to": "a@example.com"}')
    assert typo.exit_code == 2
    assert "no queue 'emials'" in typo.stderr and "--create-queue" in typo.stderr
    lines = tmp_path / "jobs.jsonl"
    lines.write_text('{"data": {"n": 1}}\n')
    assert cli("add", "--queue", "emials", "--file", str(lines)).exit_code == 2
    assert queue_row(db, schema, "emials") is None and count_jobs(db, schema) == 1

    created = cli("add", "emials", "{}", "--create-queue")
    assert created.exit_code == 0, created.output
    assert queue_row(db, schema, "emials") is not None
    known = cli("add", "emails", '{"to": "b@example.com"}')
    assert known.exit_code == 0, known.output
    assert count_jobs(db, schema) == 3


def test_cli_queue_as_an_option(cli: Cli, pq: PortQueue, db: Db, schema: str,
                                tmp_path: Any) -> None:
    """README's "Operating it" spells the queue --queue for jobs and add, as
    retry, cancel and remove take it; the argument form works as well."""
    pq.add_job(queue="emails", data={"n": 0})
    lines = tmp_path / "jobs.jsonl"
    lines.write_text('{"data": {"n": 1}}\n{"data": {"n": 2}}\n')
    from_file = cli("add", "--queue", "emails", "--file", str(lines))
    assert from_file.exit_code == 0, from_file.output
    one = cli.json("add", "--queue", "emails", '{"n": 3}')
    assert one["queue"] == "emails"
    assert pq.get_job(job_id=one["job_id"]).data == {"n": 3}
    listed = cli.json("jobs", "--queue", "emails")
    assert listed["total"] == 4 == cli.json("jobs", "emails")["total"]
    twice = cli("add", "emails", "{}", "--queue", "emails")
    assert twice.exit_code == 2 and "--queue" in twice.stderr
    assert cli("jobs", "emails", "--queue", "emails").exit_code == 2
    assert cli("jobs").exit_code == 2
    assert count_jobs(db, schema) == 4
