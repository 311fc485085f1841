"""Scenario 3: the worker's LISTEN connection is black-holed: no FIN, no RST,
the server simply stops answering. The worker must notice within a bounded
time (``listen_check_seconds``), replace the connection, and in the meantime
its poll keeps jobs flowing."""

from __future__ import annotations

import logging
import time
from typing import Any

import psycopg
import pytest

from portqueue import PortQueue
from tests.faults.harness import QUEUE, assert_nothing_lost, count_where, ledger_handler
from tests.faults.proxy import Proxy
from tests.support.waiting import wait_until

CHECK_SECONDS = 2.0
# 4/3 of the check, psycopg's 5 s wait for a cancel that cannot arrive, and
# room for a loaded CI host.
DETECTION_BOUND = CHECK_SECONDS * 4 / 3 + 5.0 + 3.0
POLL_INTERVAL = 0.5


def _live_listener(proxy: Proxy) -> Any:
    """The listener link that is forwarding, once its LISTEN is in place."""
    links = [link for link in proxy.open_links("listener") if link.forwarding]
    return links[-1] if links else None


def _listening(db: psycopg.Connection[Any], sessions: int = 1) -> bool:
    """``sessions`` listener sessions have run their LISTEN (the last statement
    is that, or the health probe that follows it). The black-holed one stays
    connected to the server, idle, so the replacement makes it two."""
    row = db.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = "
                     "'portqueue:listener' AND (query ILIKE 'LISTEN%%' OR query = 'SELECT 1') "
                     "AND state = 'idle' AND datname = current_database()").fetchone()
    return row is not None and row[0] >= sessions


def test_a_black_holed_listen_connection_is_replaced_while_polling_keeps_jobs_flowing(
    proxy: Proxy, pg_dsn: str, ledger_db: psycopg.Connection[Any], schema: str,
    pq: PortQueue, report: Any, caplog: pytest.LogCaptureFixture,
) -> None:
    db = ledger_db
    caplog.set_level(logging.WARNING, logger="portqueue.worker")
    worker = PortQueue(proxy.dsn(pg_dsn), schema=schema, pool_min_size=0, pool_max_size=4)
    worker.handler(QUEUE, concurrency=4, lease_seconds=5)(ledger_handler(pg_dsn))
    job_ids: list[str] = []

    def add(count: int) -> list[str]:
        added = [r.job_id for r in pq.add_jobs(queue=QUEUE, jobs=[{"data": {}}] * count)
                 if r.job_id is not None]
        job_ids.extend(added)
        return added

    worker.start(scheduler=False, poll_interval=POLL_INTERVAL,
                 listen_check_seconds=CHECK_SECONDS)
    try:
        first = wait_until(lambda: _live_listener(proxy), 10, "a LISTEN connection")
        wait_until(lambda: _listening(db), 10, "the listener's LISTEN")
        before = add(5)
        wait_until(lambda: count_where(db, schema, before, "completed") == 5, 10,
                   "jobs before the fault to complete")

        assert proxy.blackhole("listener") == 1
        holed = time.monotonic()
        # During the outage: jobs keep arriving, and only the poll can find them.
        during: list[str] = []
        while _live_listener(proxy) is None and time.monotonic() - holed < DETECTION_BOUND:
            during += add(2)
            time.sleep(0.25)  # the producer's pace, not a wait for an outcome
        replacement = _live_listener(proxy)
        detected = time.monotonic() - holed
        assert replacement is not None and replacement is not first, (
            f"no new LISTEN connection {DETECTION_BOUND:.0f}s after the black hole")
        completed_in_outage = count_where(db, schema, during, "completed")
        assert completed_in_outage > 0, "polling did not run a job while LISTEN was dead"

        wait_until(lambda: _listening(db, sessions=2), 10, "the new listener's LISTEN")
        after = add(5)
        wait_until(lambda: count_where(db, schema, job_ids, "completed") == len(job_ids), 20,
                   "every job to complete")
    finally:
        worker.stop()
        worker.close()

    lost = [r.getMessage() for r in caplog.records if "LISTEN connection lost" in r.getMessage()]
    assert lost, "the worker never reported replacing its LISTEN connection"
    figures = assert_nothing_lost(db, schema, job_ids)
    assert figures.statuses == {"completed": len(job_ids)}
    assert figures.duplicates == 0
    report(figures, faults="1 LISTEN black hole", detected_s=f"{detected:.1f}",
           bound_s=f"{DETECTION_BOUND:.1f}", jobs_during_outage=len(during),
           completed_during_outage=completed_in_outage, after=len(after))
