"""SPEC §10: a pull consumer steers a job as a handler does, by handing
``fail_job`` the ``Snooze`` or ``Cancel`` its own code raised."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg

from portqueue import Cancel, PortQueue, Snooze
from tests.support.rows import db_now, job_row

Db = psycopg.Connection[Any]


def test_a_snooze_puts_the_job_back_later_without_spending_an_attempt(
        client: PortQueue, db: Db, schema: str) -> None:
    job_id = client.add_job(queue="pull-steer", data=1, retry={"max_attempts": 2}).job_id
    (job,) = client.fetch_jobs(queue="pull-steer")
    before = db_now(db)

    assert client.fail_job(job_id=job.job_id, lease_token=job.lease_token, error=Snooze(60))

    row = job_row(db, schema, job_id)
    assert (row["status"], row["attempt"], row["errors"]) == ("pending", 0, [])
    assert row["start_after"] >= before + timedelta(seconds=59)
    assert client.fetch_jobs(queue="pull-steer") == [], "not before its time"
    assert not client.fail_job(job_id=job.job_id, lease_token=job.lease_token,
                               error=Snooze(1)), "the lease went with the snooze"


def test_a_cancel_ends_the_job_cancelled_with_its_reason_whatever_retry_says(
        client: PortQueue, db: Db, schema: str) -> None:
    job_id = client.add_job(queue="pull-steer", data=2, retry={"max_attempts": 5}).job_id
    (job,) = client.fetch_jobs(queue="pull-steer")

    assert client.fail_job(job_id=job.job_id, lease_token=job.lease_token,
                           error=Cancel("no such account"), retry=True)

    row = job_row(db, schema, job_id)
    assert row["status"] == "cancelled"
    assert row["errors"][-1]["message"] == "no such account"
