"""The app every fault test's worker processes run: ``portqueue worker tests.faults.app:pq``.

Settings come from the environment the harness passes (``PORTQUEUE_DSN``,
``PORTQUEUE_SCHEMA``, ``FAULT_LEASE_SECONDS``, ``FAULT_CONCURRENCY``,
``FAULT_DEAD_LETTER_QUEUE``, ``FAULT_POOL_MAX_SIZE``: the client's pool, which
also sizes the handlers' ``job.transaction()`` pool).

The handler of the ``faults`` queue:

1. records a ledger row (job id, attempt, pid, ``claimed``) on a connection
   of its own (autocommit, never the job's) before anything else, so every claim that reached
   a handler is counted even if the process dies a microsecond later;
2. injects the fault its job data asks for, on the runs listed in
   ``fault_runs`` (the n-th time any process starts this job, counted by the
   ledger; default: every run):
   ``{"fault": "exit"}`` calls ``os._exit(1)``;
   ``{"fault": "block", "lock": K}`` waits until the test releases advisory lock K;
   ``{"fault": "wait_signal"}`` waits for the job's stop signal, then returns
   without any side effect;
   ``{"sleep": S}`` works for S seconds;
3. writes its side effect (job id, attempt, pid) through ``job.transaction()``
   into ``faults.effect``, a plain table with no unique constraint, so a
   duplicate effect would show up as a second row instead of an error;
4. records ``returning`` in the ledger and returns ``{"pid", "attempt"}``.
"""

from __future__ import annotations

import os
import time
from typing import Any

import psycopg

from portqueue.worker.job import Job
from tests.support.fault_apps import fault_client, ledger_pool, record

QUEUE = "faults"

pq = fault_client()
_ledger = ledger_pool()


def _execute(query: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    with _ledger.connection() as conn:
        cursor = conn.execute(query, params)
        return cursor.fetchall() if cursor.description else []


def _record(job: Job, event: str) -> None:
    record(_ledger, job, event)


def _run_number(job: Job) -> int:
    (row,) = _execute(
        "SELECT count(*) FROM faults.ledger WHERE job_id = %s AND event = 'claimed'", (job.id,))
    return int(row[0])


@pq.handler(QUEUE, concurrency=int(os.environ.get("FAULT_CONCURRENCY", "4")),
            lease_seconds=int(os.environ.get("FAULT_LEASE_SECONDS", "2")),
            dead_letter_queue=os.environ.get("FAULT_DEAD_LETTER_QUEUE") or None)
def handle(job: Job) -> dict[str, Any]:
    _record(job, "claimed")
    data = job.data if isinstance(job.data, dict) else {}
    fault = data.get("fault")
    if fault is not None and (
            "fault_runs" not in data or _run_number(job) in data["fault_runs"]):
        if fault == "exit":
            os._exit(1)
        elif fault == "block":
            # Shared, transaction-scoped: every blocked handler proceeds once
            # the test drops its exclusive session lock. A connection of its
            # own, so a blocked handler does not hold one of the ledger's.
            with psycopg.connect(os.environ["PORTQUEUE_DSN"], autocommit=True,
                                 application_name="faults:block") as conn:
                conn.execute("SELECT pg_advisory_xact_lock_shared(%s)", (data["lock"],))
        elif fault == "wait_signal":
            job.signal.wait(timeout=120)
            _record(job, f"signalled:{job.signal.reason}")
            return {"pid": os.getpid(), "signalled": job.signal.reason}
        else:
            raise ValueError(f"unknown fault {fault!r}")
    if data.get("sleep"):
        time.sleep(float(data["sleep"]))
    with job.transaction() as conn:
        conn.execute(
            "INSERT INTO faults.effect (job_id, attempt, pid) VALUES (%s, %s, %s)",
            (job.id, job.attempt, os.getpid()))
    _record(job, "returning")
    return {"pid": os.getpid(), "attempt": job.attempt}
