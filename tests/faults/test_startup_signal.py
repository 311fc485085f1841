"""A SIGTERM while the worker is still starting (registered, ``start()`` not
yet returned; a test hook widens that window): the process stops cleanly
once started, exit 0 and unregistered, with both hosts (``PortQueue`` runs
the worker in a thread, ``AsyncPortQueue`` on the CLI's event loop). Found by
the chaos soak, where 20 workers start on 2 cores."""

from __future__ import annotations

import signal
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.faults.harness import APP, Fleet

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("app", [APP, "tests.faults.handlers_app:apq"], ids=["thread", "async"])
def test_sigterm_while_the_worker_starts_stops_it_cleanly(
    app: str, fleet: Fleet, ledger_db: psycopg.Connection[Any], schema: str,
) -> None:
    worker = fleet.worker(app=app, module="tests.faults.slow_start", ready=False)
    worker.wait_for_log("test hook: start() delayed", timeout=30)
    worker.send(signal.SIGTERM)
    assert worker.wait(15) == 0, worker.log()
    assert "received SIGTERM: draining" in worker.log()
    row = ledger_db.execute(sql.SQL("SELECT count(*) FROM {} WHERE pid = %s").format(
        sql.Identifier(schema, "worker")), [worker.pid]).fetchone()
    assert row == (0,), "the stopped worker is still registered"
