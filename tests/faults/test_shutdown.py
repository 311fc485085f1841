"""Stopping a managed worker with signals (SPEC §4, ``portqueue worker``).

SIGTERM drains: no new claims, in-flight jobs finish (their leases still
renewed), exit 0. A second SIGTERM, or SIGINT, aborts: every handler's signal
is set and unfinished jobs go back to pending at once with their attempt not
spent; the process exits 0 too (a requested stop, not a failure; exit 1 is
kept for fatal errors).
"""

from __future__ import annotations

import signal
import time
from typing import Any

import psycopg
import pytest

from portqueue import PortQueue
from tests.faults.harness import (
    QUEUE,
    Fleet,
    add_claimed,
    assert_nothing_lost,
    effects,
    job,
    ledger,
    wait_status,
)
from tests.support.locks import HeldLock
from tests.support.waiting import wait_until

LOCK = 7003
GRACE_SECONDS = 20.0


def test_sigterm_drains_the_job_in_flight_and_exits_0(
    pq: PortQueue, fleet: Fleet, ledger_db: psycopg.Connection[Any], schema: str,
    pg_dsn: str, report: Any,
) -> None:
    db = ledger_db
    with HeldLock(pg_dsn, LOCK):
        worker = fleet.worker(lease_seconds=1, grace_seconds=GRACE_SECONDS)
        job_id, _ = add_claimed(pq, db, {"fault": "block", "lock": LOCK})
        lease_at_term = job(db, schema, job_id)["lease_expires_at"]

        worker.send(signal.SIGTERM)
        termed = time.monotonic()
        worker.wait_for_log("stopping (drain)")
        late = pq.add_job(queue=QUEUE, data={}).job_id
        assert late is not None
        # Draining, the worker keeps the running job's lease alive (a drain
        # longer than the lease must not let the rescuer hand the job out).
        wait_until(lambda: job(db, schema, job_id)["lease_expires_at"] > lease_at_term, 5,
                   "the lease to be renewed while draining", interval=0.05)
        assert worker.alive()
        assert job(db, schema, job_id)["status"] == "active"
    assert worker.wait(GRACE_SECONDS) == 0
    drained = time.monotonic() - termed

    assert drained < GRACE_SECONDS
    assert "worker failed" not in worker.log()
    row = job(db, schema, job_id)
    assert (row["status"], row["attempt"]) == ("completed", 1)
    assert row["output"] == {"pid": worker.pid, "attempt": 1}
    assert len(effects(db, job_id)) == 1
    # Added after SIGTERM: never claimed by the draining worker.
    late_row = job(db, schema, late)
    assert (late_row["status"], late_row["attempt"]) == ("pending", 0)
    assert ledger(db, late) == []
    figures = assert_nothing_lost(db, schema, [job_id, late])
    report(figures, faults="1 SIGTERM", exit_code=0, drain_s=f"{drained:.1f}")


@pytest.mark.parametrize("signals", [
    pytest.param(("SIGTERM", "wait-for-drain", "SIGTERM"), id="term-then-term"),
    pytest.param(("SIGINT",), id="int"),
    pytest.param(("SIGTERM", "wait-for-drain", "SIGINT"), id="term-then-int"),
])
def test_a_second_signal_or_sigint_aborts_and_releases_the_job_unspent(
    signals: tuple[str, ...], pq: PortQueue, fleet: Fleet,
    ledger_db: psycopg.Connection[Any], schema: str, report: Any,
) -> None:
    db = ledger_db
    # A drain would wait GRACE_SECONDS for this handler: only an abort (which
    # sets its signal) ends it sooner.
    worker = fleet.worker(lease_seconds=2, grace_seconds=GRACE_SECONDS)
    job_id, _ = add_claimed(pq, db, {"fault": "wait_signal", "fault_runs": [1]},
                            retry={"max_attempts": 2})
    assert job(db, schema, job_id)["attempt"] == 1

    sent = time.monotonic()
    for step in signals:
        if step == "wait-for-drain":
            worker.wait_for_log("stopping (drain)")
        else:
            worker.send(signal.Signals[step])
    assert worker.wait(10) == 0
    stopped = time.monotonic() - sent
    assert stopped < GRACE_SECONDS / 2, "the abort waited for the drain's grace period"
    assert "released 1 running job(s) to pending" in worker.log()

    row = job(db, schema, job_id)
    assert row["status"] == "pending"
    assert row["attempt"] == 0, "the aborted attempt was spent"
    assert row["finished_at"] is None and row["lease_expires_at"] is None
    assert row["errors"] == []
    assert [r["event"] for r in ledger(db, job_id, event=None)] == [
        "claimed", "signalled:shutdown"]
    assert effects(db, job_id) == []

    # Released at once, not after a lease: the next worker runs it now, as
    # the same (unspent) attempt 1.
    successor = fleet.worker(lease_seconds=2)
    row = wait_status(db, schema, job_id, {"completed", "failed"}, timeout=10)
    assert (row["status"], row["attempt"]) == ("completed", 1)
    assert [(e["pid"], e["attempt"]) for e in effects(db, job_id)] == [(successor.pid, 1)]
    figures = assert_nothing_lost(db, schema, [job_id], faulted=[job_id])
    report(figures, faults="+".join(s for s in signals if s.startswith("SIG")), exit_code=0,
           stop_s=f"{stopped:.1f}")


@pytest.mark.parametrize(("signum", "grace_seconds"), [
    pytest.param(signal.SIGINT, GRACE_SECONDS, id="abort"),
    pytest.param(signal.SIGTERM, 1.0, id="drain-past-grace"),
])
def test_a_stopped_worker_exits_even_when_a_handler_ignores_its_signal(
    signum: signal.Signals, grace_seconds: float, pq: PortQueue, fleet: Fleet,
    ledger_db: psycopg.Connection[Any], schema: str, pg_dsn: str, report: Any,
) -> None:
    """A handler stuck where it never looks at its signal (here: waiting on a
    lock) must not keep a stopped worker alive, after an abort or a drain
    that ran out of grace: the job is released, unspent, and a late result
    would be fenced out anyway."""
    db = ledger_db
    with HeldLock(pg_dsn, LOCK):
        worker = fleet.worker(lease_seconds=2, grace_seconds=grace_seconds)
        job_id, _ = add_claimed(pq, db, {"fault": "block", "lock": LOCK, "fault_runs": [1]})
        sent = time.monotonic()
        worker.send(signum)
        code = worker.wait(10)
        stopped = time.monotonic() - sent
        row = job(db, schema, job_id)
        assert (row["status"], row["attempt"]) == ("pending", 0)
    assert code == 0
    figures = assert_nothing_lost(db, schema, [job_id], faulted=[job_id])
    assert "handler(s) still running after the worker stopped" in worker.log()
    report(figures, faults=f"{signum.name}, handler ignoring its signal", exit_code=code,
           stop_s=f"{stopped:.1f}")


def test_a_second_sigterm_before_the_drain_has_begun_still_aborts(
    pq: PortQueue, fleet: Fleet, ledger_db: psycopg.Connection[Any], schema: str,
) -> None:
    """The main thread hears SIGTERM, then is slow to begin the drain (a test
    hook delays ``stop()``; a busy host does the same); a second SIGTERM in
    that window must abort, not be queued behind the first and ignored."""
    db = ledger_db
    worker = fleet.worker(lease_seconds=2, grace_seconds=GRACE_SECONDS,
                          module="tests.faults.slow_stop")
    job_id, _ = add_claimed(pq, db, {"fault": "wait_signal"})
    worker.send(signal.SIGTERM)
    worker.wait_for_log("test hook: stop() delayed")
    worker.send(signal.SIGTERM)
    assert worker.wait(10) == 0
    assert "received SIGTERM: aborting" in worker.log()
    row = job(db, schema, job_id)
    assert (row["status"], row["attempt"]) == ("pending", 0)
    assert_nothing_lost(db, schema, [job_id])
