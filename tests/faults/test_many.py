"""Three worker processes drain 600 jobs, each writing its side effect through
``job.transaction()``: every job completed, every effect exactly once."""

from __future__ import annotations

import signal
import time
from collections import Counter
from typing import Any

import psycopg

from portqueue import PortQueue
from tests.faults.harness import QUEUE, Fleet, assert_nothing_lost, count_where, ledger, stop_all
from tests.support.waiting import wait_until

JOBS = 600
WORKERS = 3


def test_three_workers_drain_600_jobs_with_each_effect_exactly_once(
    pq: PortQueue, fleet: Fleet, ledger_db: psycopg.Connection[Any], schema: str,
    report: Any,
) -> None:
    db = ledger_db
    workers = [fleet.worker(concurrency=4) for _ in range(WORKERS)]
    started = time.monotonic()
    results = pq.add_jobs(queue=QUEUE, jobs=[{"data": {"n": n}} for n in range(JOBS)])
    job_ids = [r.job_id for r in results if r.job_id is not None]
    assert len(job_ids) == JOBS

    wait_until(lambda: count_where(db, schema, job_ids, "completed") == JOBS, 60,
               f"{JOBS} jobs to complete", interval=0.1)
    drained = time.monotonic() - started
    stop_all(workers)

    figures = assert_nothing_lost(db, schema, job_ids)
    assert figures.statuses == {"completed": JOBS}
    assert figures.effects == JOBS
    assert figures.duplicates == 0
    per_worker = Counter(row["pid"] for row in ledger(db))
    assert set(per_worker) <= {w.pid for w in workers}
    assert len(per_worker) >= 2, f"one worker took every job: {per_worker}"
    report(figures, faults=0, workers=WORKERS, per_worker=sorted(per_worker.values()),
           drain_s=f"{drained:.1f}")


def test_600_jobs_survive_a_worker_sigkilled_mid_drain(
    pq: PortQueue, fleet: Fleet, ledger_db: psycopg.Connection[Any], schema: str,
    report: Any,
) -> None:
    """The same drain, with one of the three workers SIGKILLed a third of the
    way through and started again (as a supervisor would): the jobs it held
    are rescued when their leases lapse and run again; effects stay single."""
    db = ledger_db
    workers = [fleet.worker(concurrency=4, lease_seconds=1) for _ in range(WORKERS)]
    started = time.monotonic()
    results = pq.add_jobs(queue=QUEUE, jobs=[
        {"data": {"n": n, "sleep": 0.01}, "retry": {"max_attempts": 2}} for n in range(JOBS)])
    job_ids = [r.job_id for r in results if r.job_id is not None]

    wait_until(lambda: count_where(db, schema, job_ids, "completed") >= JOBS // 3, 60,
               "a third of the jobs to complete", interval=0.02)
    victim = workers[0]
    victim.send(signal.SIGKILL)
    assert victim.wait(10) == -signal.SIGKILL
    workers[0] = fleet.worker(concurrency=4, lease_seconds=1)
    wait_until(lambda: count_where(db, schema, job_ids, "completed") == JOBS, 60,
               f"{JOBS} jobs to complete", interval=0.1)
    drained = time.monotonic() - started
    stop_all(workers)

    figures = assert_nothing_lost(db, schema, job_ids, faulted_pids=[victim.pid])
    assert figures.statuses == {"completed": JOBS}
    assert figures.effects == JOBS
    report(figures, faults="1 SIGKILL", workers=WORKERS, drain_s=f"{drained:.1f}")
