"""SPEC §10, pull consumers: ``fetch_jobs`` claims as a worker claims, and
``complete_job``, ``fail_job`` and ``extend_lease`` are the worker's fenced
writes: each returns False, writing nothing, once the lease is no longer held.

Leases lapse for real (a short ``lease_seconds``, waited out on the database
clock) and are rescued by the real rescuer service; rows are read straight
from the table."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest

from portqueue import FetchedJob, JobStatus, PortQueue
from portqueue.maintenance.rescuer import Rescuer
from tests.support.refusals import assert_refused_writing_nothing
from tests.support.rows import (
    CallerTx,
    assert_utc,
    count_jobs,
    db_now,
    job_row,
    set_dead_letter_queue,
    update_job,
)
from tests.support.services import run_once
from tests.support.waiting import wait_until
from tests.support.workers import SyncHarness, finished_row

Db = psycopg.Connection[Any]


def _lapse(db: Db, schema: str, job: FetchedJob) -> None:
    """Wait, on the database clock, until ``job``'s lease has lapsed."""
    wait_until(lambda: db_now(db) > job.lease_expires_at, timeout=10,
               what=f"the lease of {job.job_id} to lapse")


def _rescue(pg_dsn: str, schema: str) -> int:
    return int(run_once(Rescuer, pg_dsn, schema)[1])


def test_fetch_claims_as_a_worker_claims(client: PortQueue, db: Db, schema: str) -> None:
    low = client.add_job(queue="pull", data={"n": "low"}, retry={"max_attempts": 3}).job_id
    high = client.add_job(queue="pull", data={"n": "high"}, priority=5).job_id
    client.add_job(queue="pull", data="later", schedule={"start_after_seconds": 3600})
    before = db_now(db)

    jobs = client.fetch_jobs(queue="pull", limit=10, lease_seconds=30)

    assert [job.job_id for job in jobs] == [high, low], "priority first; a delayed job waits"
    first = jobs[0]
    assert (first.queue, first.data, first.attempt, first.max_attempts) == (
        "pull", {"n": "high"}, 1, 1)
    assert jobs[1].max_attempts == 3
    row = job_row(db, schema, high)
    assert row["status"] == "active" and row["attempt"] == 1, "the attempt counts at claim"
    assert row["lease_token"] == first.lease_token
    assert row["lease_expires_at"] == first.lease_expires_at
    assert_utc(first.lease_expires_at)
    assert before + timedelta(seconds=29) < first.lease_expires_at < db_now(db) + timedelta(
        seconds=31)
    assert client.fetch_jobs(queue="pull") == [], "claimed jobs are not handed out twice"


def test_fetch_honours_limit_pause_and_instance_key_patterns(
    client: PortQueue, db: Db, schema: str
) -> None:
    # The client's instance key is "test-host-ram-8gb" (tests/conftest.py).
    mine = client.add_job(queue="keyed", data=1, preferred_instance_key_pattern="^test-host-")
    theirs = client.add_job(queue="keyed", data=2, preferred_instance_key_pattern="^gpu-")
    plain = [client.add_job(queue="keyed", data=n).job_id for n in range(3)]

    client.pause_queue(queue="keyed")
    assert client.fetch_jobs(queue="keyed") == [], "a paused queue hands nothing out"
    client.resume_queue(queue="keyed")

    assert len(client.fetch_jobs(queue="keyed", limit=2)) == 2, "the limit holds"
    fetched = {job.job_id for job in client.fetch_jobs(queue="keyed", limit=10)}
    assert theirs.job_id not in fetched, "a pattern the key does not match is passed over"
    assert job_row(db, schema, str(theirs.job_id))["status"] == "pending"
    assert job_row(db, schema, str(mine.job_id))["status"] == "active", "a matching one is not"
    assert count_jobs(db, schema, "queue = 'keyed' AND status = 'active'") == 4
    assert all(job_row(db, schema, job_id)["status"] == "active" for job_id in plain)


def test_fetch_passes_over_a_pattern_postgresql_refuses(
    client: PortQueue, db: Db, schema: str, pg_dsn: str
) -> None:
    # Written by SQL, past the producer's check: the claim must not fail on it.
    refused = str(client.add_job(queue="keyed", data="refused", priority=9).job_id)
    update_job(db, schema, refused, "preferred_instance_key_pattern = 'ram-('")
    plain = client.add_job(queue="keyed", data="plain").job_id
    matching = client.add_job(queue="keyed", data="mine",
                              preferred_instance_key_pattern="ram-8gb$").job_id
    fetched = client.fetch_jobs(queue="keyed", limit=5)
    assert {job.job_id for job in fetched} == {plain, matching}
    assert job_row(db, schema, refused)["status"] == "pending"
    assert client.fetch_jobs(queue="keyed") == [], "the verdict is kept between calls"

    with PortQueue(pg_dsn, schema=schema) as keyless:
        client.add_job(queue="keyless", data=1, preferred_instance_key_pattern=".*")
        assert keyless.fetch_jobs(queue="keyless") == [], "no instance key matches no pattern"


def test_complete_job_writes_the_output_once(client: PortQueue, db: Db, schema: str) -> None:
    client.add_job(queue="pull", data=1)
    (job,) = client.fetch_jobs(queue="pull")

    assert client.complete_job(job_id=job.job_id, lease_token=job.lease_token,
                               output={"sent": True}) is True
    row = job_row(db, schema, job.job_id)
    assert (row["status"], row["output"]) == ("completed", {"sent": True})
    assert row["lease_expires_at"] is None and row["finished_at"] is not None
    assert client.complete_job(job_id=job.job_id, lease_token=job.lease_token) is False
    assert job_row(db, schema, job.job_id)["output"] == {"sent": True}


def test_a_stale_lease_token_is_refused_on_every_write(
    client: PortQueue, db: Db, schema: str, pg_dsn: str
) -> None:
    job_id = client.add_job(queue="pull", data=1, retry={"max_attempts": 3}).job_id
    (stale,) = client.fetch_jobs(queue="pull", lease_seconds=1)
    _lapse(db, schema, stale)
    assert _rescue(pg_dsn, schema) == 1
    row = job_row(db, schema, stale.job_id)
    assert row["status"] == "pending" and row["errors"][-1]["type"] == "LeaseExpired"

    with PortQueue(pg_dsn, schema=schema) as other_consumer:
        (current,) = other_consumer.fetch_jobs(queue="pull", lease_seconds=60)
    assert current.job_id == job_id and current.attempt == 2
    assert current.lease_token > stale.lease_token
    held = job_row(db, schema, job_id)

    assert client.complete_job(job_id=job_id, lease_token=stale.lease_token, output="x") is False
    assert client.fail_job(job_id=job_id, lease_token=stale.lease_token, error="late") is False
    assert client.extend_lease(job_id=job_id, lease_token=stale.lease_token,
                               lease_seconds=3600) is False
    assert job_row(db, schema, job_id) == held, "the stale writes changed nothing"

    assert client.extend_lease(job_id=job_id, lease_token=current.lease_token,
                               lease_seconds=120) is True
    assert client.complete_job(job_id=job_id, lease_token=current.lease_token) is True
    assert job_row(db, schema, job_id)["status"] == "completed"


def test_extend_lease_moves_the_expiry_on_the_database_clock(
    client: PortQueue, db: Db, schema: str
) -> None:
    client.add_job(queue="pull", data=1)
    (job,) = client.fetch_jobs(queue="pull", lease_seconds=5)
    assert client.extend_lease(job_id=job.job_id, lease_token=job.lease_token,
                               lease_seconds=600) is True
    expires = job_row(db, schema, job.job_id)["lease_expires_at"]
    assert expires > db_now(db) + timedelta(seconds=590)


@pytest.mark.parametrize("commit", [True, False])
def test_complete_job_commits_with_the_callers_transaction(
    client: PortQueue, db: Db, schema: str, pg_dsn: str, orders: None, commit: bool
) -> None:
    client.add_job(queue="pull", data={"order": 7})
    (job,) = client.fetch_jobs(queue="pull")
    with CallerTx(client, pg_dsn) as caller:
        caller.execute("INSERT INTO tx_conformance.orders (id) VALUES ('order-7')")
        assert client.complete_job(job_id=job.job_id, lease_token=job.lease_token,
                                   output="done", tx=caller.tx) is True
        assert job_row(db, schema, job.job_id)["status"] == "active", "not before the commit"
        caller.commit() if commit else caller.rollback()
    row = job_row(db, schema, job.job_id)
    shipped = db.execute(
        "SELECT count(*) FROM tx_conformance.orders WHERE id = 'order-7'").fetchone()
    assert shipped is not None
    if commit:
        assert (row["status"], row["output"], shipped[0]) == ("completed", "done", 1)
    else:
        assert (row["status"], row["output"], shipped[0]) == ("active", None, 0)
        assert client.complete_job(job_id=job.job_id, lease_token=job.lease_token) is True


def test_fail_job_follows_the_retry_policy_and_backoff(
    client: PortQueue, db: Db, schema: str
) -> None:
    job_id = client.add_job(queue="pull", data=1, retry={
        "max_attempts": 2, "delay_seconds": 100,
        "backoff": {"strategy": "exponential", "factor": 3}}).job_id
    (job,) = client.fetch_jobs(queue="pull")
    before = db_now(db)
    assert client.fail_job(job_id=job.job_id, lease_token=job.lease_token,
                           error="SMTP timeout") is True
    row = job_row(db, schema, job_id)
    assert row["status"] == "pending" and row["finished_at"] is None
    assert before + timedelta(seconds=99) < row["start_after"] < db_now(db) + timedelta(
        seconds=101), "attempt 1's delay: 100 s x 3^0"
    (error,) = row["errors"]
    assert (error["attempt"], error["type"], error["message"]) == (1, "fail_job", "SMTP timeout")
    assert row["error"] == "SMTP timeout"

    update_job(db, schema, job_id, "start_after = now()")  # the retry's delay, waited out
    (again,) = client.fetch_jobs(queue="pull")
    assert again.attempt == 2
    try:
        raise ConnectionError("still down")
    except ConnectionError as exc:
        assert client.fail_job(job_id=job_id, lease_token=again.lease_token, error=exc) is True
    row = job_row(db, schema, job_id)
    assert row["status"] == "failed", "no attempts left: it ends failed, retry or not"
    last = row["errors"][-1]
    assert (last["type"], last["message"]) == ("ConnectionError", "still down")
    assert "raise ConnectionError" in last["traceback"]


def test_fail_job_without_retry_ends_it_failed_and_dead_lettered(
    client: PortQueue, db: Db, schema: str
) -> None:
    set_dead_letter_queue(db, schema, "pull", "pull-dead")
    job_id = client.add_job(queue="pull", data={"to": "a@b"}, retry={"max_attempts": 5}).job_id
    (job,) = client.fetch_jobs(queue="pull")
    assert client.fail_job(job_id=job_id, lease_token=job.lease_token, error="bad address",
                           retry=False) is True
    assert job_row(db, schema, job_id)["status"] == "failed"
    (copy,) = client.get_jobs(queue="pull-dead").items
    assert (copy.source_job_id, copy.data, copy.status) == (job_id, {"to": "a@b"},
                                                           JobStatus.PENDING)


def test_fail_job_on_a_job_whose_cancel_was_requested_ends_it_cancelled(
    client: PortQueue, db: Db, schema: str
) -> None:
    job_id = client.add_job(queue="pull", data=1, retry={"max_attempts": 5}).job_id
    (job,) = client.fetch_jobs(queue="pull")
    assert client.cancel_job(job_id=job_id).outcome.value == "signalled"
    assert client.fail_job(job_id=job_id, lease_token=job.lease_token, error="stopped") is True
    row = job_row(db, schema, job_id)
    assert row["status"] == "cancelled" and row["finished_at"] is not None


JOB = "0192f3e4-0000-7000-8000-00000000abcd"


@pytest.mark.parametrize(("method", "arguments", "argument"), [
    ("fetch_jobs", {"queue": ""}, "queue"),
    ("fetch_jobs", {"queue": "pull", "limit": 0}, "limit"),
    ("fetch_jobs", {"queue": "pull", "limit": True}, "limit"),
    ("fetch_jobs", {"queue": "pull", "lease_seconds": 0}, "lease_seconds"),
    ("fetch_jobs", {"queue": "pull", "lease_seconds": 1.5}, "lease_seconds"),
    ("complete_job", {"job_id": "nope", "lease_token": 1}, "job_id"),
    ("complete_job", {"job_id": JOB, "lease_token": 0}, "lease_token"),
    ("complete_job", {"job_id": JOB, "lease_token": "1"}, "lease_token"),
    ("complete_job", {"job_id": JOB, "lease_token": 1, "output": float("nan")}, "output"),
    ("fail_job", {"job_id": JOB, "lease_token": 1, "error": ""}, "error"),
    ("fail_job", {"job_id": JOB, "lease_token": 1, "error": 42}, "error"),
    ("fail_job", {"job_id": JOB, "lease_token": 1, "error": "x", "retry": "no"}, "retry"),
    ("fail_job", {"job_id": None, "lease_token": 1, "error": "x"}, "job_id"),
    ("extend_lease", {"job_id": JOB, "lease_token": 1, "lease_seconds": -1}, "lease_seconds"),
    ("extend_lease", {"job_id": JOB, "lease_token": None, "lease_seconds": 5}, "lease_token"),
])
def test_bad_input_is_refused_before_anything_is_written(
    client: PortQueue, db: Db, schema: str, method: str, arguments: dict[str, Any],
    argument: str
) -> None:
    client.add_job(queue="pull", data=1)
    assert_refused_writing_nothing(
        db, schema, lambda: getattr(client, method)(**arguments), argument)


def test_an_abandoned_fetch_is_rescued_and_run_by_a_worker(
    harness: SyncHarness, db: Db, schema: str, pg_dsn: str
) -> None:
    pq = harness.pq
    ran: list[int] = []

    @pq.handler("mixed", retry={"max_attempts": 2})
    def handler(job: Any) -> str:
        ran.append(job.attempt)
        return "run by the worker"

    job_id = pq.add_job(queue="mixed", data=1).job_id
    with PortQueue(pg_dsn, schema=schema) as consumer:
        (abandoned,) = consumer.fetch_jobs(queue="mixed", lease_seconds=1)
        harness.start(maintenance=True)  # its rescuer takes the lease back once lapsed
        row = wait_until(lambda: finished_row(db, schema, str(job_id)), timeout=15,
                         what="the rescued job to be run by the worker")
        assert (row["status"], row["output"], ran) == ("completed", "run by the worker", [2])
        assert [error["type"] for error in row["errors"]] == ["LeaseExpired"]
        assert consumer.complete_job(job_id=abandoned.job_id,
                                     lease_token=abandoned.lease_token) is False
