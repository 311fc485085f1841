"""Handlers that misbehave (scenario 8), in a managed ``AsyncPortQueue`` worker
(``tests.faults.handlers_app``):

- an async handler that blocks the event loop past its lease: the whole
  worker freezes (heartbeats too), the lease lapses, another worker rescues
  and finishes the job, and the frozen run's late completion is fenced out;
- an async handler that swallows its cancellation and runs on: the stopped
  worker still exits within grace + ``HANDLER_UNWIND_SECONDS`` (+ margin),
  closing the handler's connection, so its open transaction rolls back;
- handlers raising each ``BaseException`` subclass: the attempt fails like
  any exception (recorded by type, retried per policy), the worker carries on.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg import sql

from portqueue import AsyncPortQueue, PortQueue
from portqueue.worker.job import AsyncJob, Job
from portqueue.worker.runtime import HANDLER_UNWIND_SECONDS
from tests.faults.harness import (
    Fleet,
    assert_nothing_lost,
    effects,
    job,
    ledger,
    wait_claimed,
    wait_status,
)
from tests.support.activity import handler_connections
from tests.support.waiting import wait_until, wait_until_async

pytestmark = pytest.mark.slow

APP = "tests.faults.handlers_app:apq"
QUEUE = "faults-async"       # handlers_app's queues: its async handler's,
SYNC_QUEUE = "faults-sync"   # and its sync handler's
EXCEPTIONS = {
    "KeyboardInterrupt": "KeyboardInterrupt",
    "SystemExit": "SystemExit",
    "GeneratorExit": "GeneratorExit",
    "CancelledError": "asyncio.exceptions.CancelledError",
    "CustomStop": "tests.faults.handlers_app.CustomStop",
}
BLOCK_SECONDS = 10.0
LEASE_SECONDS = 1
GRACE_SECONDS = 1.0
# Stop bound for a worker whose handler refuses to end: the drain's grace, the
# unwind the cancelled handlers get, and a margin for a busy 2-core host.
STOP_BOUND_SECONDS = GRACE_SECONDS + HANDLER_UNWIND_SECONDS + 4.0


def test_handlers_raising_each_base_exception_fail_the_attempt_and_the_worker_carries_on(
    pq: PortQueue, fleet: Fleet, ledger_db: psycopg.Connection[Any], schema: str,
    report: Any,
) -> None:
    db = ledger_db
    worker = fleet.worker(app=APP, lease_seconds=5, concurrency=4)
    jobs: dict[str, tuple[str, str]] = {}
    for queue in (QUEUE, SYNC_QUEUE):
        for name in EXCEPTIONS:
            if queue == SYNC_QUEUE and name == "CancelledError":
                continue  # a thread has no task to cancel; the async one covers it
            added = pq.add_job(queue=queue, data={"fault": "raise", "exception": name,
                                                  "fault_runs": [1]},
                               retry={"max_attempts": 2, "delay_seconds": 0})
            assert added.job_id is not None
            jobs[added.job_id] = (queue, name)
    # Always raising, one attempt: ends failed, and the worker still serves.
    final = pq.add_job(queue=QUEUE, data={"fault": "raise", "exception": "KeyboardInterrupt"},
                       retry={"max_attempts": 1}).job_id
    assert final is not None
    rows = {job_id: wait_status(db, schema, job_id, {"completed", "failed"}, timeout=30)
            for job_id in [*jobs, final]}
    after = pq.add_job(queue=QUEUE, data={}).job_id
    assert after is not None
    assert wait_status(db, schema, after, {"completed", "failed"})["status"] == "completed"

    problems = []
    for job_id, (queue, name) in jobs.items():
        row = rows[job_id]
        got = (row["status"], row["attempt"], [e["type"] for e in row["errors"]])
        if got != ("completed", 2, [EXCEPTIONS[name]]):
            problems.append(f"{queue} {name}: {got}")
    assert not problems, problems
    failed = rows[final]
    assert (failed["status"], failed["attempt"]) == ("failed", 1)
    assert [e["type"] for e in failed["errors"]] == ["KeyboardInterrupt"]
    assert failed["errors"][0]["message"] == "KeyboardInterrupt raised by the handler"
    assert worker.alive() and "worker failed" not in worker.log()
    worker.send(signal.SIGTERM)
    assert worker.wait(15) == 0, worker.log()
    figures = assert_nothing_lost(db, schema, [*jobs, final, after], faulted=[*jobs, final])
    assert figures.duplicates == len(jobs)
    report(figures, faults=f"{len(jobs) + 1} BaseException raises", worker_exit=0)


def test_an_async_handler_blocking_the_event_loop_past_its_lease_is_fenced_out(
    pq: PortQueue, fleet: Fleet, ledger_db: psycopg.Connection[Any], schema: str,
    report: Any,
) -> None:
    """``time.sleep`` in an async handler freezes its worker's loop: no
    heartbeat renews the lease, so it lapses; the other worker's rescuer hands
    the job out again and runs it. When the frozen loop resumes, its handler's
    ``job.transaction()`` completion no longer matches the lease and rolls
    back: one effect, from the run that owns the row.

    The frozen worker is the maintenance leader, the case where nobody else
    may rescue until its term ends: the term must end with its lease."""
    db = ledger_db
    frozen = fleet.worker(app=APP, lease_seconds=LEASE_SECONDS)
    wait_until(lambda: leader(db, schema) == frozen.pid, 10, "the first worker to lead")
    job_id = pq.add_job(queue=QUEUE, data={"fault": "block_loop", "seconds": BLOCK_SECONDS,
                                           "fault_runs": [1]},
                        retry={"max_attempts": 2}).job_id
    assert job_id is not None
    wait_claimed(db, job_id)
    blocked_at = time.monotonic()
    term_left = db.execute(sql.SQL(
        "SELECT extract(epoch FROM until - now()) FROM {} WHERE role = 'maintenance'").format(
        sql.Identifier(schema, "maintenance_leader"))).fetchone()
    assert term_left is not None and term_left[0] <= LEASE_SECONDS + 0.1, term_left
    other = fleet.worker(app=APP, lease_seconds=LEASE_SECONDS)
    row = wait_status(db, schema, job_id, {"completed", "failed"},
                      timeout=BLOCK_SECONDS - (time.monotonic() - blocked_at),
                      what="the other worker to rescue and finish the job while the "
                           "first one's loop is blocked")
    recovered = time.monotonic() - blocked_at
    assert (row["status"], row["attempt"]) == ("completed", 2)
    assert row["output"] == {"pid": other.pid, "attempt": 2}
    assert [e["type"] for e in row["errors"]] == ["LeaseExpired"]

    frozen.wait_for_log(f"job {job_id} on {QUEUE!r}: lease lost", timeout=BLOCK_SECONDS + 10)
    wait_until(lambda: len(ledger(db, job_id, event="returning")) == 2, 10,
               "the blocked handler to return", interval=0.05)
    after = job(db, schema, job_id)
    assert (after["status"], after["output"], after["finished_at"]) == (
        "completed", row["output"], row["finished_at"]), "the late run touched the row"
    assert [(e["pid"], e["attempt"]) for e in effects(db, job_id)] == [(other.pid, 2)]
    # The frozen worker is sound again: it takes and finishes new work.
    other.send(signal.SIGTERM)
    assert other.wait(15) == 0
    later = pq.add_job(queue=QUEUE, data={}).job_id
    assert later is not None
    assert wait_status(db, schema, later, {"completed"})["output"]["pid"] == frozen.pid
    frozen.send(signal.SIGTERM)
    assert frozen.wait(15) == 0, frozen.log()
    figures = assert_nothing_lost(db, schema, [job_id, later], faulted=[job_id])
    report(figures, faults=f"event loop blocked {BLOCK_SECONDS:.0f}s past a 1s lease",
           fenced_completions=1, recovered_s=f"{recovered:.1f}")


def leader(db: psycopg.Connection[Any], schema: str) -> int | None:
    """The pid of the worker leading the maintenance role, if any."""
    row = db.execute(sql.SQL(
        "SELECT w.pid FROM {} l JOIN {} w ON w.id = l.worker_id "
        "WHERE l.role = 'maintenance' AND l.until > now()").format(
        sql.Identifier(schema, "maintenance_leader"), sql.Identifier(schema, "worker"))
    ).fetchone()
    return None if row is None else int(row[0])


def test_a_handler_swallowing_its_cancellation_cannot_hold_the_worker_or_its_connection(
    pq: PortQueue, fleet: Fleet, ledger_db: psycopg.Connection[Any], schema: str,
    report: Any,
) -> None:
    """SIGTERM: the drain's grace passes, the job is released, the handler is
    cancelled and swallows it; HANDLER_UNWIND_SECONDS later its connection is
    closed and the process exits 0 (an abort takes the same path, sooner)."""
    db = ledger_db
    signum = signal.SIGTERM
    worker = fleet.worker(app=APP, lease_seconds=2, grace_seconds=GRACE_SECONDS)
    job_id = pq.add_job(queue=QUEUE, data={"fault": "swallow_cancel", "seconds": 60,
                                           "fault_runs": [1]},
                        retry={"max_attempts": 2}).job_id
    assert job_id is not None
    wait_claimed(db, job_id)
    # Its job.transaction() holds the (uncommitted) effect on a handler connection.
    wait_until(lambda: handler_connections(db, "idle in transaction%") == 1, 10,
               "the handler's transaction to be open", interval=0.05)

    worker.send(signum)
    sent = time.monotonic()
    code = worker.wait(STOP_BOUND_SECONDS + 30)
    stopped = time.monotonic() - sent
    assert code == 0, worker.log()
    assert stopped < STOP_BOUND_SECONDS, f"stopping took {stopped:.1f}s\n{worker.log()}"
    assert ledger(db, job_id, event="swallowed"), "the handler was never cancelled"
    assert handler_connections(db) == 0
    row = job(db, schema, job_id)
    assert (row["status"], row["attempt"]) == ("pending", 0), "released, attempt unspent"
    assert effects(db, job_id) == [], "the swallowing handler's transaction committed"

    successor = fleet.worker(app=APP, lease_seconds=2)
    row = wait_status(db, schema, job_id, {"completed", "failed"})
    assert (row["status"], row["attempt"]) == ("completed", 1)
    assert [(e["pid"], e["attempt"]) for e in effects(db, job_id)] == [(successor.pid, 1)]
    figures = assert_nothing_lost(db, schema, [job_id], faulted=[job_id])
    report(figures, faults=f"{signum.name} to a worker whose handler swallows cancellation",
           stop_s=f"{stopped:.1f}", bound_s=f"{STOP_BOUND_SECONDS:.0f}")


async def test_in_process_stop_closes_the_connection_of_a_handler_swallowing_cancellation(
    apq_factory: Callable[..., AsyncPortQueue], db: psycopg.Connection[Any], schema: str,
) -> None:
    """The same handler in an application's own event loop: ``await
    apq.stop()`` returns within its bound, and the handler's connection is
    closed (its transaction rolled back, its locks freed) although the
    handler itself is still running; its late return changes nothing."""
    apq = apq_factory()
    swallowed: list[float] = []
    release = asyncio.Event()
    ended = asyncio.Event()

    @apq.handler("swallow", lease_seconds=2)
    async def handler(job: AsyncJob) -> str:
        try:
            async with job.transaction() as conn:
                await conn.execute("SELECT 1")
            while not release.is_set():
                try:
                    await release.wait()
                except asyncio.CancelledError:
                    swallowed.append(time.monotonic())
            return "late"
        finally:
            ended.set()

    await apq.start(grace_seconds=GRACE_SECONDS, maintenance=False, scheduler=False)
    try:
        job_id = (await apq.add_job(queue="swallow", data={})).job_id
        assert job_id is not None
        await wait_until_async(lambda: handler_connections(db, "idle in transaction%") == 1, 10,
                               "the handler's transaction to be open")
        sent = time.monotonic()
        await apq.stop()
        stopped = time.monotonic() - sent
        assert stopped < STOP_BOUND_SECONDS
        assert swallowed and not ended.is_set(), "the handler should still be running"
        assert handler_connections(db) == 0, "the stuck handler's connection leaked"
        row = job(db, schema, job_id)
        assert (row["status"], row["attempt"], row["output"]) == ("pending", 0, None)
        release.set()
        await asyncio.wait_for(ended.wait(), 5)
        assert job(db, schema, job_id)["status"] == "pending"
    finally:
        release.set()
        await apq.aclose()


def test_an_async_job_exiting_its_worker_inside_its_transaction_fails_after_max_attempts(
    pq: PortQueue, fleet: Fleet, ledger_db: psycopg.Connection[Any], schema: str,
    report: Any,
) -> None:
    """test_kill.py's poison job, in an async handler that dies with its
    ``job.transaction()`` open and its side effect written: a supervised
    worker (restarted when it dies) claims it exactly max_attempts times,
    then it is failed; none of its effects survive; other jobs complete."""
    db = ledger_db
    worker = fleet.worker(app=APP, lease_seconds=1)
    killer = pq.add_job(queue=QUEUE, data={"fault": "exit_in_tx"},
                        retry={"max_attempts": 3}).job_id
    assert killer is not None
    others = [r.job_id for r in pq.add_jobs(queue=QUEUE, jobs=[
        {"data": {"n": n}, "retry": {"max_attempts": 5}} for n in range(30)])]
    dead: list[int] = []
    deadline = time.monotonic() + 60
    while job(db, schema, killer)["status"] != "failed":
        assert time.monotonic() < deadline, job(db, schema, killer)
        if not worker.alive():
            assert worker.popen.returncode == 1, worker.log()
            dead.append(worker.pid)
            worker = fleet.worker(app=APP, lease_seconds=1, ready=False)
        time.sleep(0.05)  # the supervisor's pace
    for job_id in others:
        assert job_id is not None
        wait_status(db, schema, job_id, {"completed"}, timeout=30)
    claims = ledger(db, killer)
    assert [c["attempt"] for c in claims] == [1, 2, 3]
    assert sorted(dead) == sorted(c["pid"] for c in claims)
    assert effects(db, killer) == [], "an effect of a transaction that died committed"
    final = job(db, schema, killer)
    assert [e["type"] for e in final["errors"]] == ["LeaseExpired"] * 3
    worker.wait_for_log("started", timeout=30)
    worker.send(signal.SIGTERM)
    assert worker.wait(15) == 0, worker.log()
    figures = assert_nothing_lost(db, schema, [killer, *[j for j in others if j]],
                                  faulted=[killer], faulted_pids=dead)
    report(figures, faults=f"{len(dead)} os._exit(1) inside job.transaction()",
           killer_claims=len(claims))


def test_in_process_stop_ends_the_session_of_a_sync_handler_stuck_in_its_transaction(
    pq: PortQueue, db: psycopg.Connection[Any], schema: str,
) -> None:
    """A sync handler cannot be interrupted: one stuck (ignoring its signal)
    after writing in ``job.transaction()`` would keep that transaction open,
    with its locks, after ``pq.stop()`` returned. The worker has the server
    end that session instead; the handler's late return changes nothing."""
    gate = threading.Event()
    returned = threading.Event()

    @pq.handler("stuck", lease_seconds=2)
    def handler(job: Job) -> str:
        try:
            with job.transaction() as conn:
                conn.execute("SELECT 1")
            gate.wait(30)  # ignores job.signal
            return "late"
        finally:
            returned.set()

    pq.start(grace_seconds=GRACE_SECONDS, maintenance=False, scheduler=False)
    try:
        job_id = pq.add_job(queue="stuck", data={}).job_id
        assert job_id is not None
        wait_until(lambda: handler_connections(db, "idle in transaction%") == 1, 10,
                   "the handler's transaction to be open", interval=0.05)
        sent = time.monotonic()
        pq.stop()
        stopped = time.monotonic() - sent
        assert not returned.is_set(), "the handler should still be running"
        assert handler_connections(db) == 0, "the stuck handler's session was left open"
        assert stopped < STOP_BOUND_SECONDS
        row = job(db, schema, job_id)
        assert (row["status"], row["attempt"], row["output"]) == ("pending", 0, None)
    finally:
        gate.set()
    assert returned.wait(10)
    assert job(db, schema, job_id)["status"] == "pending"
