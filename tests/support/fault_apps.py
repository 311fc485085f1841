"""What the fault tests' worker apps (tests/faults/app.py, outcome_app.py) share:
the client and the ledger pool built from the environment the harness passes,
and the ledger row a handler writes first."""

from __future__ import annotations

import os

from psycopg_pool import ConnectionPool

from portqueue import PortQueue
from portqueue.worker.job import Job


def fault_client() -> PortQueue:
    # Small pools: a CI run has several of these processes per test, two tests
    # at a time, on one server with max_connections = 100.
    return PortQueue(
        os.environ["PORTQUEUE_DSN"],
        schema=os.environ.get("PORTQUEUE_SCHEMA", "portqueue"),
        pool_min_size=0,
        pool_max_size=int(os.environ.get("FAULT_POOL_MAX_SIZE", "4")),
    )


def ledger_pool() -> ConnectionPool:
    # The ledger's own connections, never the job's: autocommit, so a row is
    # durable the moment the handler has written it.
    return ConnectionPool(
        os.environ["PORTQUEUE_DSN"], min_size=0, max_size=2, open=True, name="faults:ledger",
        kwargs={"autocommit": True, "application_name": "faults:ledger"})


def record(ledger: ConnectionPool, job: Job, event: str) -> None:
    """A ledger row: this process saw ``job``'s attempt reach ``event``."""
    with ledger.connection() as conn:
        conn.execute("INSERT INTO faults.ledger (job_id, attempt, pid, event) "
                     "VALUES (%s, %s, %s, %s)", (job.id, job.attempt, os.getpid(), event))
