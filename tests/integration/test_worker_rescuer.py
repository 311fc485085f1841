"""SPEC §4 and §5, the lease rescuer as a worker runs it: an active job whose
lease lapsed goes back to pending with its attempt kept (or to failed when its
attempts are spent), and a job completed concurrently is left alone.

Lapsed leases are arranged with SQL (what a killed worker leaves behind); the
rescue is done by a real worker's maintenance; tests/faults/ kills real
worker processes."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from tests.support.rows import job_row, update_job
from tests.support.waiting import wait_until
from tests.support.workers import SyncHarness, finished_row, row_where

Db = psycopg.Connection[Any]

LAPSED = ("status = 'active', attempt = 1, lease_token = 1, worker_id = gen_random_uuid(), "
          "started_at = now() - interval '2 minutes', "
          "lease_expires_at = now() - interval '1 second'")
LEASED = ("status = 'active', attempt = 1, lease_token = 1, started_at = now(), "
          "lease_expires_at = now() + interval '1 hour'")


def test_a_workers_maintenance_rescues_lapsed_leases(
    harness: SyncHarness, pg_dsn: str, db: Db, schema: str
) -> None:
    pq = harness.pq
    attempts_seen: list[int] = []

    @pq.handler("work")
    def handler(job: Any) -> str:
        attempts_seen.append(job.attempt)
        return "finished by the second worker"

    # On a queue this worker does not handle, so rescued jobs stay put to look at.
    spare = pq.add_job(queue="abandoned", data="spare", retry={"max_attempts": 3}).job_id
    spent = pq.add_job(queue="abandoned", data="spent").job_id  # one attempt only
    healthy = pq.add_job(queue="abandoned", data="healthy", retry={"max_attempts": 3}).job_id
    racing = pq.add_job(queue="abandoned", data="racing", retry={"max_attempts": 3}).job_id
    # A handled job whose worker died: rescued, then run again here.
    orphan = pq.add_job(queue="work", data="orphan", retry={"max_attempts": 2}).job_id
    assert spare and spent and healthy and racing and orphan
    for job_id in (spare, spent, racing, orphan):
        update_job(db, schema, job_id, LAPSED)
    update_job(db, schema, healthy, LEASED)

    with psycopg.connect(pg_dsn) as completer:
        # Its worker is completing "racing" right now: the row is locked.
        completed = completer.execute(sql.SQL(
            "UPDATE {} SET status = 'completed', finished_at = now(), "
            "output = '\"won the race\"', lease_expires_at = NULL "
            "WHERE id = %s AND lease_token = 1 AND status = 'active'"
        ).format(sql.Identifier(schema, "job")), [racing])
        assert completed.rowcount == 1
        harness.start(maintenance=True)

        row = wait_until(lambda: row_where(db, schema, spare, "status = 'pending'"),
                         what="the lapsed job to be rescued")
        assert row["attempt"] == 1, "the attempt it spent stays spent"
        assert row["lease_expires_at"] is None and row["worker_id"] is None
        assert row["finished_at"] is None
        (error,) = row["errors"]
        assert error["type"] == "LeaseExpired" and error["attempt"] == 1 and error["at"]

        row = wait_until(lambda: finished_row(db, schema, spent), what="the spent job")
        assert row["status"] == "failed" and row["attempt"] == 1
        assert [e["type"] for e in row["errors"]] == ["LeaseExpired"]
        completer.commit()

    row = job_row(db, schema, racing)
    assert row["status"] == "completed" and row["output"] == "won the race"
    assert row["errors"] == [], "the rescuer passed over the row being completed"
    row = job_row(db, schema, healthy)
    assert row["status"] == "active" and row["errors"] == [], "a live lease is not rescued"

    row = wait_until(lambda: finished_row(db, schema, orphan), what="the orphan to be rerun")
    assert row["status"] == "completed" and row["attempt"] == 2 and attempts_seen == [2]
    assert [e["type"] for e in row["errors"]] == ["LeaseExpired"]


def test_a_heartbeating_job_is_never_rescued(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    """A running job's lease is short (1 s) but renewed every third of it: the
    rescuer, running in the same worker, leaves it alone across its passes."""
    pq = harness.pq
    gate = harness.gate()

    @pq.handler("steady", lease_seconds=1)
    def handler(job: Any) -> str:
        gate.wait(20)
        return "done"

    harness.start(maintenance=True)
    job_id = pq.add_job(queue="steady", data={}).job_id
    assert job_id
    first = wait_until(lambda: row_where(db, schema, job_id, "status = 'active'"), what="claim")
    # Renewals go by for longer than the rescuer's interval (about 2 s).
    renewals = {first["lease_expires_at"]}

    def renewed() -> bool:
        renewals.add(job_row(db, schema, job_id)["lease_expires_at"])
        return len(renewals) >= 8

    wait_until(renewed, timeout=8, what="eight lease renewals")
    row = job_row(db, schema, job_id)
    assert row["status"] == "active" and row["errors"] == [] and row["attempt"] == 1
    gate.set()
    row = wait_until(lambda: finished_row(db, schema, job_id), what="the job to finish")
    assert row["status"] == "completed" and row["errors"] == []
