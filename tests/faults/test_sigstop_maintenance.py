"""Issue 22, "a worker SIGSTOPped inside a maintenance pass": the maintenance
leader is frozen (SIGSTOP) with its rescuer pass open, holding the rescuer's
advisory lock in an open transaction and the maintenance role's term. Another
worker must rescue a lapsed lease within the frozen worker's lease plus a few
seconds: the server ends the frozen session's transaction
(``idle_in_transaction_session_timeout``), which frees the lock, and the
frozen leader's term runs out, so the other worker leads and rescues.

Nothing is timed by sleeping: the rescue is a database condition waited on
with the bound as its deadline."""

from __future__ import annotations

import signal
import time
from typing import Any

import psycopg
import pytest

from portqueue import PortQueue
from tests.faults.harness import Fleet
from tests.faults.paused_maintenance import PAUSED
from tests.support.rows import update_job
from tests.support.waiting import wait_until
from tests.support.workers import row_where

pytestmark = pytest.mark.slow

# The frozen worker's lease (its queue's): what bounds how long a role stays
# with a worker that stopped answering.
LEASE_SECONDS = 10
# "A few seconds": a rescuer pass or two (2 s apart, jittered), and room for
# a loaded CI host.
SLACK_SECONDS = 6.0
LAPSED = ("status = 'active', attempt = 1, lease_token = 1, worker_id = gen_random_uuid(), "
          "started_at = now() - interval '2 minutes', "
          "lease_expires_at = now() - interval '1 second'")


def test_a_worker_frozen_inside_a_maintenance_pass_does_not_hold_back_rescues(
    pq: PortQueue, fleet: Fleet, ledger_db: psycopg.Connection[Any], schema: str,
) -> None:
    db = ledger_db
    # The first worker leads maintenance (it is alone) and its first rescuer
    # pass stops with its lock held and its transaction open.
    frozen = fleet.worker(lease_seconds=LEASE_SECONDS,
                          module="tests.faults.paused_maintenance")
    frozen.wait_for_log(PAUSED, timeout=20)
    frozen.send(signal.SIGSTOP)
    stopped_at = time.monotonic()
    healthy = fleet.worker(lease_seconds=LEASE_SECONDS)

    # A job of a queue neither consumes, its lease lapsed now: only a rescue
    # puts it back to pending.
    job_id = pq.add_job(queue="abandoned", data={}, retry={"max_attempts": 3}).job_id
    assert job_id
    update_job(db, schema, job_id, LAPSED)
    lapsed_at = time.monotonic()
    wait_until(lambda: row_where(db, schema, job_id, "status = 'pending'"),
               LEASE_SECONDS + SLACK_SECONDS,
               "the lapsed lease to be rescued while the maintenance leader is frozen")
    rescued = time.monotonic() - lapsed_at
    assert frozen.alive(), "the frozen worker exited: the scenario did not happen"
    assert healthy.alive(), healthy.log()
    print(f"rescued {rescued:.1f} s after the lapse, "
          f"{time.monotonic() - stopped_at:.1f} s after the SIGSTOP")
