"""Scenario 2: PostgreSQL itself restarts (fast shutdown, then start on the
same port) about 30 % into a 5,000-job drain by four worker processes; and
the smaller cousin: one session of each of a worker's roles terminated.

The server is this test's own (``owned_server``), so the restart disturbs no
other test, whichever server the rest of the suite uses. The workers must
stay up, back off while the server is gone, reconnect, and finish every job;
a restart may cost a run of each job that was running (an attempt killed
with its session), and nothing else."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from portqueue import PortQueue
from portqueue.migrate import migrate
from tests.faults.harness import (
    QUEUE,
    Fleet,
    assert_nothing_lost,
    count_where,
    ledger,
    reset_ledger,
)
from tests.faults.owned_server import OwnedServer
from tests.support.waiting import wait_until

# 5,000 as issue 7 asks is too slow for CI on two cores (four worker
# processes, each job writing ledger rows and an effect; docs/performance.md);
# CI runs 1,000, and FAULTS_RESTART_JOBS=5000 runs the full drain.
JOBS = int(os.environ.get("FAULTS_RESTART_JOBS", "1000"))
WORKERS = 4
CONCURRENCY = 4
SCHEMA = "portqueue"
# The app's handler holds up to two ledger connections of its own besides
# the job's: a restart can fail one run per slot and per ledger connection.
MAX_RERUNS = WORKERS * (CONCURRENCY + 2)


@pytest.fixture
def restart_db(owned_server: OwnedServer) -> Iterator[psycopg.Connection[Any]]:
    migrate(owned_server.dsn, schema=SCHEMA)
    with psycopg.connect(owned_server.dsn, autocommit=True) as conn:
        reset_ledger(conn)
    conn = psycopg.connect(owned_server.dsn, autocommit=True)
    try:
        yield conn
    finally:
        conn.close()


@pytest.mark.slow
def test_workers_survive_a_postgres_restart_mid_drain_and_finish_every_job(
    owned_server: OwnedServer, restart_db: psycopg.Connection[Any], tmp_path: Path,
    report: Any,
) -> None:
    fleet = Fleet(owned_server.dsn, SCHEMA, tmp_path, restart_db)
    try:
        workers = [fleet.worker(concurrency=CONCURRENCY, lease_seconds=5)
                   for _ in range(WORKERS)]
        with PortQueue(owned_server.dsn, schema=SCHEMA) as producer:
            results = producer.add_jobs(queue=QUEUE, jobs=[
                {"data": {"n": n}, "retry": {"max_attempts": 3}} for n in range(JOBS)])
        job_ids = [r.job_id for r in results if r.job_id is not None]
        assert len(job_ids) == JOBS
        started = time.monotonic()
        wait_until(lambda: count_where(restart_db, SCHEMA, job_ids, "completed") >= JOBS * 3 // 10,
                   90, "30 % of the jobs to complete", interval=0.05)
        completed_at_stop = count_where(restart_db, SCHEMA, job_ids, "completed")

        restart_db.close()
        stopped = time.monotonic()
        owned_server.stop("fast")
        down_s = time.monotonic() - stopped
        owned_server.start()
        restarted = time.monotonic()
        db = psycopg.connect(owned_server.dsn, autocommit=True)
        fleet.db = db
        try:
            wait_until(lambda: count_where(db, SCHEMA, job_ids, "completed") > completed_at_stop,
                       30, "a job to complete after the restart", interval=0.05)
            resumed_s = time.monotonic() - restarted
            wait_until(lambda: count_where(db, SCHEMA, job_ids, "completed") == JOBS, 120,
                       f"{JOBS} jobs to complete", interval=0.2)
            drained_s = time.monotonic() - started
            for worker in workers:
                assert worker.alive(), f"{worker.name} died in the restart\n{worker.log()}"
                worker.send(signal.SIGTERM)
            for worker in workers:
                assert worker.wait(20) == 0, worker.log()

            # The restart is the only fault: any job run twice was hit by it
            # (and their number is bounded below).
            runs = Counter(row["job_id"] for row in ledger(db))
            reran = [job_id for job_id, count in runs.items() if count > 1]
            figures = assert_nothing_lost(db, SCHEMA, job_ids, faulted=reran)
        finally:
            db.close()
    finally:
        fleet.close()

    assert figures.statuses == {"completed": JOBS}
    assert figures.effects == JOBS
    assert figures.duplicates <= MAX_RERUNS, f"{figures.duplicates} reruns for one restart"
    report(figures, faults="1 PostgreSQL restart (fast)", workers=WORKERS,
           completed_at_restart=completed_at_stop, down_s=f"{down_s:.2f}",
           resumed_s=f"{resumed_s:.1f}", drain_s=f"{drained_s:.1f}")


@pytest.mark.parametrize("role", ["listener", "fetcher", "worker", "handler"])
def test_a_worker_recovers_when_a_session_of_each_role_is_terminated(
    role: str, pq: PortQueue, fleet: Fleet, ledger_db: psycopg.Connection[Any], schema: str,
    report: Any,
) -> None:
    """``pg_terminate_backend`` on the worker's connections of one role (the
    LISTEN connection, the claims' and heartbeats', the pool completions use,
    the handlers'), mid-drain: the worker stays up and every job completes."""
    db = ledger_db
    worker = fleet.worker(concurrency=4, lease_seconds=2)
    results = pq.add_jobs(queue=QUEUE, jobs=[
        {"data": {"n": n, "sleep": 0.05}, "retry": {"max_attempts": 3}} for n in range(120)])
    job_ids = [r.job_id for r in results if r.job_id is not None]
    wait_until(lambda: count_where(db, schema, job_ids, "completed") >= 20, 30,
               "the drain to be under way", interval=0.02)
    application = f"portqueue:{role}"

    def sessions() -> list[int]:
        return [r[0] for r in db.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = %s", [application]).fetchall()]

    victims = wait_until(sessions, 10, f"a {application} session")
    db.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", [victims])
    if role in ("listener", "fetcher"):  # long-lived: replaced by the worker
        wait_until(lambda: set(sessions()) - set(victims), 15, f"a new {application} session")
    wait_until(lambda: count_where(db, schema, job_ids, "completed") == len(job_ids), 60,
               "every job to complete", interval=0.05)
    assert worker.alive(), worker.log()
    worker.send(signal.SIGTERM)
    assert worker.wait(15) == 0, worker.log()
    if role == "listener":
        assert "LISTEN connection lost" in worker.log()

    runs = Counter(row["job_id"] for row in ledger(db))
    reran = [job_id for job_id, count in runs.items() if count > 1]
    figures = assert_nothing_lost(db, schema, job_ids, faulted=reran)
    assert figures.statuses == {"completed": len(job_ids)}
    assert figures.duplicates <= 4, "more reruns than the worker had running jobs"
    report(figures, faults=f"{len(victims)} {application} session(s) terminated")
