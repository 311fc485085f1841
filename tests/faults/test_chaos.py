"""Chaos (scenario 1): a fleet of worker processes drains a backlog while a
random one is SIGKILLed and started again on a fixed beat, until every job
is finished. Killed workers' jobs are rescued when their leases lapse and run
again; every side effect (written through ``job.transaction()``) exists once.

The CI variant is scaled to a 2-core runner; ``PORTQUEUE_SOAK=1`` runs the
full one (20 workers, 10,000 jobs, a kill every 2 s), which needs a server
with ``max_connections`` of about 300 (see docs/reliability.md).
"""

from __future__ import annotations

import os
import random
import signal
import time
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg import sql

from portqueue import PortQueue
from tests.faults.harness import (
    QUEUE,
    Fleet,
    Proc,
    assert_nothing_lost,
    count_where,
    stop_all,
)

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Chaos:
    workers: int
    jobs: int
    kill_every: float
    # A beat is skipped while more than this many workers are down (killed
    # and not yet registered again): on a busy host restarts are slower than
    # the beat, and killing faster than the supervisor restarts would leave
    # no fleet to speak of.
    max_down: int
    # Long enough that a heartbeat delayed by a loaded host does not lapse
    # (a re-run nobody caused would fail the check), short enough that
    # killed workers' jobs are rescued within seconds.
    lease_seconds: int
    deadline: float


CI = Chaos(workers=4, jobs=1_000, kill_every=1.0, max_down=1, lease_seconds=2,
           deadline=90.0)
SOAK = Chaos(workers=20, jobs=10_000, kill_every=2.0, max_down=3, lease_seconds=3,
             deadline=900.0)
CHAOS = SOAK if os.environ.get("PORTQUEUE_SOAK") == "1" else CI
# Each job works a little, so a kill always finds jobs in flight.
WORK_SECONDS = 0.04
CONCURRENCY = 2
# Generous: a job is re-run once per kill that catches it in flight.
MAX_ATTEMPTS = 25


def start_worker(fleet: Fleet) -> Proc:
    # Small pools: CHAOS.workers processes share one server's connections.
    return fleet.worker(lease_seconds=CHAOS.lease_seconds, concurrency=CONCURRENCY,
                        poll_interval=0.5, ready=False, FAULT_POOL_MAX_SIZE="2")


def registered(db: psycopg.Connection[Any], schema: str, workers: list[Proc]) -> list[int]:
    """Indexes of the workers that have registered (are claiming jobs)."""
    rows = db.execute(sql.SQL("SELECT pid FROM {} WHERE pid = ANY(%s)").format(
        sql.Identifier(schema, "worker")), [[w.pid for w in workers]]).fetchall()
    pids = {pid for (pid,) in rows}
    return [index for index, worker in enumerate(workers) if worker.pid in pids]


def restart_refused(fleet: Fleet, workers: list[Proc]) -> int:
    """Restarts (as a supervisor would) the workers that exited because the
    server had no connection left for them (a shared CI server, two test
    processes): how many. Any other exit fails the test."""
    restarted = 0
    for index, worker in enumerate(workers):
        if worker.alive():
            continue
        assert "too many clients" in worker.log(), f"{worker.name} died:\n{worker.log()}"
        workers[index] = start_worker(fleet)
        restarted += 1
    return restarted


def test_chaos_random_worker_sigkilled_and_restarted_until_drained(
    pq: PortQueue, fleet: Fleet, ledger_db: psycopg.Connection[Any], schema: str,
    report: Any,
) -> None:
    db = ledger_db
    seed = int(os.environ.get("PORTQUEUE_CHAOS_SEED", time.time_ns() % 1_000_000))
    rng = random.Random(seed)
    workers = [start_worker(fleet) for _ in range(CHAOS.workers)]
    for worker in workers:
        fleet.wait_registered(worker, timeout=60)
    job_ids: list[str] = []
    for start in range(0, CHAOS.jobs, 1_000):
        results = pq.add_jobs(queue=QUEUE, jobs=[
            {"data": {"n": n, "sleep": WORK_SECONDS}, "retry": {"max_attempts": MAX_ATTEMPTS}}
            for n in range(start, min(start + 1_000, CHAOS.jobs))])
        job_ids += [r.job_id for r in results if r.job_id is not None]
    assert len(job_ids) == CHAOS.jobs
    started = time.monotonic()
    killed: list[int] = []
    skipped = 0   # beats that found too many workers still restarting
    restarted = 0  # workers the server refused a connection at start-up
    next_kill = started + CHAOS.kill_every
    while (done := count_where(db, schema, job_ids, "completed")) < CHAOS.jobs:
        now = time.monotonic()
        assert now - started < CHAOS.deadline, (
            f"{done}/{CHAOS.jobs} completed after {len(killed)} kills (seed {seed})")
        serving = registered(db, schema, workers) if now >= next_kill else []
        if now >= next_kill and len(serving) < CHAOS.workers - CHAOS.max_down:
            skipped += 1
            next_kill = now + CHAOS.kill_every
        elif serving:
            # A running worker: killing one still booting would only slow
            # the fleet down, never catch a job in flight.
            index = rng.choice(serving)
            victim = workers[index]
            victim.send(signal.SIGKILL)
            victim.wait(10)
            killed.append(victim.pid)
            workers[index] = start_worker(fleet)   # as a supervisor would
            next_kill = now + CHAOS.kill_every
        restarted += restart_refused(fleet, workers)
        time.sleep(0.05)  # the watch loop's pace, not a wait for anything
    drained = time.monotonic() - started

    deadline = time.monotonic() + 60
    # "started" is logged once a worker can be stopped cleanly.
    while not all("started" in worker.log() for worker in workers):
        assert time.monotonic() < deadline, [w.log() for w in workers]
        restarted += restart_refused(fleet, workers)
        time.sleep(0.05)  # polling pace
    stop_all(workers, timeout=30)
    figures = assert_nothing_lost(db, schema, job_ids, faulted_pids=killed)
    assert figures.statuses == {"completed": CHAOS.jobs}
    assert figures.effects == CHAOS.jobs
    assert len(killed) >= 3, f"the drain outran the chaos: {len(killed)} kill(s)"
    report(figures, faults=f"{len(killed)} SIGKILL", workers=CHAOS.workers, seed=seed,
           skipped_beats=skipped, refused_starts=restarted, drain_s=f"{drained:.1f}",
           soak=CHAOS is SOAK)
