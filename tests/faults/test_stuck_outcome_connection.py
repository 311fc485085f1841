"""Issue 22's scenario: 200 jobs, 8 attempts, two worker processes with
maintenance on (so lapsed leases are rescued), one of them black-holed on its
outcome connection (the ``worker`` pool, which writes every outcome of
``outcome_app``). Before the worker had backpressure, the stuck worker ran
hundreds of handlers to the end and recorded none, jobs ran more than once,
and some ended ``failed`` with ``LeaseExpired`` although every run had
succeeded. Now: no job ends failed, every job completes, and the stuck worker
never runs a job twice.

The stuck write ends at the worker role's deadline, and its connection is
replaced then; the test waits for that, so the deadline is shortened
(``short_deadlines``) from production's 30 s to ``STUCK_SECONDS``, which
still outlasts every job's settling several times over (the issue measured
jobs of 0.2 s; 0.05 s runs the same claims and outcomes, four times sooner)."""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from portqueue import PortQueue
from tests.faults.harness import QUEUE, Fleet, count_where, ledger, link_in_use
from tests.faults.proxy import Proxy
from tests.support.waiting import wait_until

JOBS = 200
JOB_SECONDS = 0.05
STUCK_SECONDS = 15
MAX_ATTEMPTS = 8
LEASE_SECONDS = 2
GRACE_SECONDS = 5.0
APP = "tests.faults.outcome_app:pq"
# ``python -m …`` from the repository root: the workers run this checkout's
# code, whichever checkout the environment's console script imports.
CLI = "portqueue.cli"
SHORT_DEADLINES = "tests.faults.short_deadlines"


@pytest.mark.slow
def test_a_worker_stuck_on_its_outcome_connection_fails_nothing_and_runs_nothing_twice(
    proxy: Proxy, pg_dsn: str, ledger_db: psycopg.Connection[Any], schema: str,
    pq: PortQueue, fleet: Fleet, tmp_path: Path,
) -> None:
    if proxy.upstream.host.startswith("/"):
        pytest.skip("needs a TCP upstream: PORTQUEUE_TEST_DSN with a host")
    db = ledger_db
    (tmp_path / "stuck").mkdir()
    stuck_fleet = Fleet(proxy.dsn(pg_dsn), schema, tmp_path / "stuck", db)
    try:
        stuck = stuck_fleet.worker(lease_seconds=LEASE_SECONDS, grace_seconds=GRACE_SECONDS,
                                   app=APP, module=SHORT_DEADLINES,
                                   FAULT_STATEMENT_SECONDS=str(STUCK_SECONDS))
        first = [r.job_id for r in pq.add_jobs(queue=QUEUE, jobs=[{"data": {}}] * 4)
                 if r.job_id is not None]
        wait_until(lambda: count_where(db, schema, first, "completed") == len(first), 20,
                   "the stuck worker's first jobs")
        wait_until(lambda: link_in_use(proxy, db, "worker"), 20,
                   "the stuck worker's outcome connection")
        assert proxy.blackhole("worker") >= 1

        healthy = fleet.worker(lease_seconds=LEASE_SECONDS, grace_seconds=GRACE_SECONDS,
                               app=APP, module=CLI)
        job_ids = [r.job_id for r in pq.add_jobs(queue=QUEUE, jobs=[
            {"data": {"sleep": JOB_SECONDS}, "retry": {"max_attempts": MAX_ATTEMPTS}}] * JOBS)
            if r.job_id is not None]
        assert len(job_ids) == JOBS

        def settled() -> bool:
            row = db.execute(sql.SQL(
                "SELECT count(*) FROM {} WHERE id = ANY(%s::uuid[]) "
                "AND status IN ('completed', 'failed', 'cancelled', 'expired')").format(
                sql.Identifier(schema, "job")), [job_ids]).fetchone()
            return row is not None and row[0] == JOBS

        wait_until(settled, 120, "every job to finish")
        failed = count_where(db, schema, job_ids, "failed")
        runs = Counter(row["job_id"] for row in ledger(db)
                       if row["pid"] == stuck.pid and str(row["job_id"]) in job_ids)
        twice = {job: n for job, n in runs.items() if n > 1}
        stuck.send(signal.SIGTERM)
        healthy.send(signal.SIGTERM)
        assert stuck.wait(GRACE_SECONDS + STUCK_SECONDS) == 0, stuck.log()
    finally:
        stuck_fleet.close()

    assert failed == 0, f"{failed} job(s) ended failed"
    assert count_where(db, schema, job_ids, "completed") == JOBS
    assert not twice, f"the stuck worker ran jobs more than once: {twice}"
    print(f"[faults] stuck outcome connection: jobs={JOBS} stuck_runs={sum(runs.values())} "
          f"healthy_runs={sum(1 for row in ledger(db) if row['pid'] == healthy.pid)}")
