"""Pool starvation (scenario 9): a worker with a pool of 2 connections runs
20 handlers at once, each reading through the client's pool and holding a
``job.transaction()`` connection a while, so handlers queue for connections
longer than their lease. Heartbeats, claims and completions run on the
worker's own connections (a dedicated heartbeat connection, the worker
pool), so no lease lapses and every job completes on its first attempt.
"""

from __future__ import annotations

import signal
import threading
import time
from typing import Any

import psycopg
import pytest
from psycopg import sql

from portqueue import PortQueue
from tests.faults.harness import Fleet, assert_nothing_lost, count_where

pytestmark = pytest.mark.slow

APP = "tests.faults.handlers_app:apq"
QUEUE = "faults-async"
JOBS = 40
CONCURRENCY = 20
POOL = 2
HOLD_SECONDS = 0.2
LEASE_SECONDS = 1


class LapseWatch:
    """Polls, on a connection of its own, for active jobs whose lease has
    lapsed, and keeps the largest count seen."""

    def __init__(self, dsn: str, schema: str) -> None:
        self.query = sql.SQL("SELECT count(*) FROM {} WHERE status = 'active' "
                             "AND lease_expires_at < now()").format(
            sql.Identifier(schema, "job"))
        self.dsn = dsn
        self.worst = 0
        self.polls = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self._stop.wait(0.05):
                row = conn.execute(self.query).fetchone()
                self.worst = max(self.worst, int(row[0]) if row else 0)
                self.polls += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def test_handlers_starving_a_two_connection_pool_never_starve_heartbeats(
    pq: PortQueue, fleet: Fleet, ledger_db: psycopg.Connection[Any], schema: str,
    pg_dsn: str, report: Any,
) -> None:
    db = ledger_db
    worker = fleet.worker(app=APP, lease_seconds=LEASE_SECONDS, concurrency=CONCURRENCY,
                          FAULT_POOL_MAX_SIZE=str(POOL))
    watch = LapseWatch(pg_dsn, schema)
    try:
        started = time.monotonic()
        results = pq.add_jobs(queue=QUEUE, jobs=[
            {"data": {"n": n, "read_job": True, "sleep_in_tx": HOLD_SECONDS},
             "retry": {"max_attempts": 3}} for n in range(JOBS)])
        job_ids = [r.job_id for r in results if r.job_id is not None]
        deadline = time.monotonic() + 60
        while count_where(db, schema, job_ids, "completed") < JOBS:
            assert time.monotonic() < deadline, worker.log()
            time.sleep(0.1)  # polling pace
        drained = time.monotonic() - started
    finally:
        watch.stop()
    worker.send(signal.SIGTERM)
    assert worker.wait(15) == 0, worker.log()

    # The starvation was real: some handler waited for connections longer
    # than its lease (from its first ledger row to its side effect).
    (waited,) = db.execute(
        "SELECT max(extract(epoch FROM e.at - l.at))::float FROM faults.effect e "
        "JOIN faults.ledger l ON l.job_id = e.job_id AND l.event = 'claimed'").fetchone() or (0,)
    assert waited > LEASE_SECONDS, f"no handler waited past its lease ({waited:.2f}s)"
    assert watch.polls > 10 and watch.worst == 0, f"{watch.worst} lapsed lease(s) seen"
    assert "lease lost" not in worker.log()
    figures = assert_nothing_lost(db, schema, job_ids)
    assert figures.statuses == {"completed": JOBS} and figures.duplicates == 0
    attempts = db.execute(sql.SQL("SELECT max(attempt), count(*) FILTER (WHERE errors <> "
                                  "'[]'::jsonb) FROM {} WHERE id = ANY(%s::uuid[])").format(
        sql.Identifier(schema, "job")), [job_ids]).fetchone()
    assert attempts == (1, 0)
    report(figures, faults=f"pool {POOL} for {CONCURRENCY} handlers", lapsed_leases=0,
           longest_wait_s=f"{waited:.2f}", lease_s=LEASE_SECONDS, drain_s=f"{drained:.1f}")
