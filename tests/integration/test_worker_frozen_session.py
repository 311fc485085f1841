"""Issue 22: a worker frozen (SIGSTOP, a stalled VM) or cut off inside a
maintenance transaction cannot keep its lock. Its session is a real one with
the worker pool's settings (``connections.role_kwargs``) that takes the
rescuer's lock in a transaction and then goes silent, as a frozen process
does; the server ends it after IDLE_IN_TRANSACTION_SECONDS, and a healthy
worker rescues a lapsed lease within that plus a couple of rescuer passes."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from portqueue.driver import execute_sync
from portqueue.maintenance.service import lock_key
from portqueue.worker import connections
from tests.support.rows import update_job
from tests.support.waiting import wait_until
from tests.support.workers import SyncHarness, row_where

Db = psycopg.Connection[Any]
LAPSED = ("status = 'active', attempt = 1, lease_token = 1, worker_id = gen_random_uuid(), "
          "started_at = now() - interval '2 minutes', "
          "lease_expires_at = now() - interval '1 second'")


# The server's limit on a silent transaction, shortened from production's: the
# same timeout ends the same session, and the test waits it out.
IDLE_SECONDS = 3.0


def test_a_frozen_maintenance_transaction_loses_its_lock_within_seconds(
    harness: SyncHarness, db: Db, schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connections, "IDLE_IN_TRANSACTION_SECONDS", IDLE_SECONDS)
    pq = harness.pq
    settings = pq._settings
    job_id = pq.add_job(queue="abandoned", data={}, retry={"max_attempts": 3}).job_id
    assert job_id
    update_job(db, schema, job_id, LAPSED)
    frozen = psycopg.connect(settings.dsn, **connections.role_kwargs(settings, "worker"))
    try:
        (lock,) = execute_sync(frozen, settings.queries(
            "try_maintenance_lock", key=lock_key(schema, "rescuer")))
        assert lock["acquired"], "the frozen session holds the rescuer's lock"
        harness.start(queues=[], maintenance=True)
        # Rescuer passes every ~2 s find the lock taken, until the server ends
        # the silent session.
        bound = connections.IDLE_IN_TRANSACTION_SECONDS + 10
        wait_until(lambda: row_where(db, schema, job_id, "status = 'pending'"), bound,
                   "the lapsed lease to be rescued despite the frozen lock holder")
        with pytest.raises(psycopg.Error):
            frozen.execute("SELECT 1")  # the server ended the silent session
    finally:
        frozen.close()
