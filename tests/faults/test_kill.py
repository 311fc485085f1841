"""Workers that die or freeze mid-job: SIGKILL, SIGSTOP past the lease, and a
job that kills its worker on every attempt. Leases lapse, the rescuer (in the
surviving workers' maintenance) hands the job out again, fencing refuses the
zombie's late completion, and nothing is lost or done twice."""

from __future__ import annotations

import signal
import time
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from portqueue import PortQueue
from tests.faults.harness import (
    QUEUE,
    Fleet,
    Proc,
    add_claimed,
    assert_nothing_lost,
    effects,
    job,
    ledger,
    wait_status,
)
from tests.support.locks import HeldLock
from tests.support.waiting import wait_until

LOCK = 7001
DEAD = "faults-dead"


def lease_expired_errors(row: dict[str, Any]) -> list[dict[str, Any]]:
    return [error for error in row["errors"] if error["type"] == "LeaseExpired"]


def blocked_job_claimed(pq: PortQueue, fleet: Fleet,
                        db: psycopg.Connection[Any]) -> tuple[Proc, str]:
    """A worker (2 s lease) that has claimed, as attempt 1 of 3, a job blocked
    on ``LOCK`` in its first run: the worker and the job's id."""
    worker = fleet.worker(lease_seconds=2)
    job_id, (claim,) = add_claimed(pq, db, {"fault": "block", "lock": LOCK, "fault_runs": [1]},
                                   retry={"max_attempts": 3})
    assert (claim["pid"], claim["attempt"]) == (worker.pid, 1)
    return worker, job_id


def test_sigkill_mid_job_is_rescued_and_finished_by_another_worker(
    pq: PortQueue, fleet: Fleet, ledger_db: psycopg.Connection[Any], schema: str,
    pg_dsn: str, report: Any,
) -> None:
    db = ledger_db
    with HeldLock(pg_dsn, LOCK):
        first, job_id = blocked_job_claimed(pq, fleet, db)

        first.send(signal.SIGKILL)
        assert first.wait(10) == -signal.SIGKILL
        killed_at = time.monotonic()
        second = fleet.worker(lease_seconds=2)
        row = wait_status(db, schema, job_id, {"completed", "failed"}, timeout=30,
                          what="the second worker to rescue and finish the job")
        recovered = time.monotonic() - killed_at

    assert row["status"] == "completed"
    assert row["attempt"] == 2
    assert row["output"] == {"pid": second.pid, "attempt": 2}
    (expired,) = lease_expired_errors(row)
    assert expired["attempt"] == 1
    assert [(c["pid"], c["attempt"]) for c in ledger(db, job_id)] == [
        (first.pid, 1), (second.pid, 2)]
    assert [(e["pid"], e["attempt"]) for e in effects(db, job_id)] == [(second.pid, 2)]
    figures = assert_nothing_lost(db, schema, [job_id], faulted=[job_id])
    report(figures, faults="1 SIGKILL", recovered_s=f"{recovered:.1f}")


def test_sigstop_past_the_lease_then_sigcont_is_fenced_out(
    pq: PortQueue, fleet: Fleet, ledger_db: psycopg.Connection[Any], schema: str,
    pg_dsn: str, report: Any,
) -> None:
    db = ledger_db
    with HeldLock(pg_dsn, LOCK) as lock:
        zombie, job_id = blocked_job_claimed(pq, fleet, db)

        # Frozen mid-job: no heartbeat, no completion, but the process and its
        # connections live on, holding the attempt it believes it owns.
        zombie.send(signal.SIGSTOP)
        stopped_at = time.monotonic()
        rescuer = fleet.worker(lease_seconds=2)
        row = wait_status(db, schema, job_id, {"completed", "failed"}, timeout=30,
                          what="the second worker to rescue and complete the job")
        assert row["status"] == "completed"
        recovered = time.monotonic() - stopped_at

        # Thaw the zombie and let its handler run on: it writes its side effect
        # in job.transaction() and returns, and its completion must be refused.
        lock.release()
        zombie.send(signal.SIGCONT)
        wait_until(lambda: len(ledger(db, job_id, event="returning")) == 2, 20,
                   "the zombie's handler to return", interval=0.05)
        zombie.wait_for_log(f"job {job_id} on 'faults': lease lost")
        zombie.send(signal.SIGTERM)
        assert zombie.wait(15) == 0

    after = job(db, schema, job_id)
    assert after["status"] == "completed"
    assert after["output"] == {"pid": rescuer.pid, "attempt": 2}
    assert after["finished_at"] == row["finished_at"], "the zombie touched the finished row"
    assert after["lease_token"] == row["lease_token"] == 2
    assert [(r["pid"], r["attempt"]) for r in ledger(db, job_id, event="returning")] == [
        (rescuer.pid, 2), (zombie.pid, 1)]
    assert [(e["pid"], e["attempt"]) for e in effects(db, job_id)] == [(rescuer.pid, 2)]
    (expired,) = lease_expired_errors(after)
    assert expired["attempt"] == 1
    figures = assert_nothing_lost(db, schema, [job_id], faulted=[job_id])
    report(figures, faults="1 SIGSTOP+SIGCONT", fenced_completions=1,
           recovered_s=f"{recovered:.1f}")


def test_a_job_that_kills_its_worker_every_time_fails_after_max_attempts(
    pq: PortQueue, fleet: Fleet, ledger_db: psycopg.Connection[Any], schema: str,
    report: Any,
) -> None:
    """Two supervised workers (restarted when they die, as systemd would);
    a job that ``os._exit(1)``s on every attempt, among a trickle of ordinary
    jobs on the same queue. The attempt counts at claim, so the killer ends
    ``failed`` after exactly max_attempts claims, and is copied to the queue's
    dead-letter queue like any job that ran out of attempts (a poison job is
    the one a dead-letter queue is for); the others keep flowing."""
    db = ledger_db
    started = time.monotonic()
    workers = [fleet.worker(lease_seconds=1, dead_letter_queue=DEAD) for _ in range(2)]
    dead_pids: list[int] = []
    killer = pq.add_job(queue=QUEUE, data={"fault": "exit"}, retry={"max_attempts": 3}).job_id
    assert killer is not None
    ordinary: list[str] = []
    deadline = time.monotonic() + 45
    while job(db, schema, killer)["status"] != "failed":
        assert time.monotonic() < deadline, f"killer still {job(db, schema, killer)['status']}"
        for index, worker in enumerate(workers):
            if not worker.alive():
                assert worker.popen.returncode == 1, worker.log()
                dead_pids.append(worker.pid)
                workers[index] = fleet.worker(lease_seconds=1, ready=False,
                                              dead_letter_queue=DEAD)
        # Ordinary jobs keep arriving; a kill may take some in flight with it,
        # hence a few attempts to spare (each kill can cost a job one attempt).
        added = pq.add_job(queue=QUEUE, data={"n": len(ordinary)}, retry={"max_attempts": 5})
        assert added.job_id is not None
        ordinary.append(added.job_id)
        time.sleep(0.1)  # the trickle's pace, not a wait for anything

    final = job(db, schema, killer)
    for worker in workers:
        fleet.wait_registered(worker)
    wait_until(lambda: all(job(db, schema, job_id)["status"] == "completed"
                           for job_id in ordinary), 30, "every ordinary job to complete",
               interval=0.1)
    elapsed = time.monotonic() - started

    claims = ledger(db, killer)
    assert [c["attempt"] for c in claims] == [1, 2, 3]
    assert final["attempt"] == 3 and final["finished_at"] is not None
    assert [e["attempt"] for e in lease_expired_errors(final)] == [1, 2, 3]
    assert sorted(dead_pids) == sorted(c["pid"] for c in claims), (
        "each claim of the killer killed exactly the worker that made it")
    with db.cursor(row_factory=dict_row) as cursor:
        copies = cursor.execute(sql.SQL(
            "SELECT queue, status::text AS status, data FROM {} WHERE source_job_id = %s"
        ).format(sql.Identifier(schema, "job")), [killer]).fetchall()
    assert copies == [{"queue": DEAD, "status": "pending", "data": {"fault": "exit"}}]
    # Flowing meanwhile: ordinary jobs completed between the killer's first
    # claim and the moment it was failed.
    first_claim = claims[0]["at"]
    row = db.execute(sql.SQL(
        "SELECT count(*) FROM {} WHERE id = ANY(%s::uuid[]) AND finished_at BETWEEN %s AND %s"
    ).format(sql.Identifier(schema, "job")), [ordinary, first_claim, final["finished_at"]],
    ).fetchone()
    assert row is not None
    completed_meanwhile = int(row[0])
    assert completed_meanwhile >= 10, completed_meanwhile
    figures = assert_nothing_lost(db, schema, [killer, *ordinary], faulted=[killer],
                                  faulted_pids=dead_pids)
    report(figures, faults=f"{len(dead_pids)} os._exit(1)", killer_claims=len(claims),
           ordinary_completed_meanwhile=completed_meanwhile, wall_s=f"{elapsed:.1f}")
