"""Scenario 4: an ambiguous commit on a completion. The proxy lets the
completion's COMMIT reach the server, swallows the reply and cuts the
connection: the completion committed, and the worker cannot know it.

It must find out (the row still holding its lease token says so), so that the
handler is not run again, nothing is reported as a lost lease, and the job
ends completed with its ``job_completed`` event. Two places commit a
completion: the handler's own ``job.transaction()`` (role ``handler``), and
the worker's completer (role ``worker``) for a handler without one."""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

import psycopg
import pytest

from portqueue import JobSnapshot, PortQueue
from portqueue.worker.job import Job
from tests.faults.harness import (
    QUEUE,
    assert_nothing_lost,
    effects,
    job,
    ledger,
    ledger_handler,
    wait_claimed,
    wait_status,
)
from tests.faults.proxy import Proxy
from tests.support.waiting import wait_until


def _held_handler(ledger_dsn: str, go: threading.Event) -> Any:
    """Records its claim, waits for ``go``, writes its effect on a connection of
    its own (no ``job.transaction()``: the completer commits the completion)."""
    def handle(job: Job) -> dict[str, Any]:
        with psycopg.connect(ledger_dsn, autocommit=True) as conn:
            conn.execute("INSERT INTO faults.ledger (job_id, attempt, pid, event) "
                         "VALUES (%s, %s, %s, 'claimed')", (job.id, job.attempt, os.getpid()))
            assert go.wait(20), "the test never released the handler"
            conn.execute("INSERT INTO faults.effect (job_id, attempt, pid) VALUES (%s, %s, %s)",
                         (job.id, job.attempt, os.getpid()))
        return {"pid": os.getpid(), "attempt": job.attempt}

    return handle


@pytest.mark.parametrize("role", ["handler", "worker"])
def test_a_completion_whose_commit_reply_is_lost_is_not_rerun_nor_reported_lost(
    role: str, proxy: Proxy, pg_dsn: str, ledger_db: psycopg.Connection[Any], schema: str,
    pq: PortQueue, report: Any, caplog: pytest.LogCaptureFixture,
) -> None:
    db = ledger_db
    caplog.set_level(logging.INFO, logger="portqueue.worker")
    go = threading.Event()
    worker = PortQueue(proxy.dsn(pg_dsn), schema=schema, pool_min_size=0, pool_max_size=4)
    # One slot and no maintenance: once the job runs, the worker's own pool
    # commits nothing but the completion (no claims, no rescuer passes).
    handler = ledger_handler(pg_dsn) if role == "handler" else _held_handler(pg_dsn, go)
    worker.handler(QUEUE, concurrency=1, lease_seconds=5,
                   retry={"max_attempts": 3})(handler)
    started: list[JobSnapshot] = []
    completed: list[JobSnapshot] = []
    worker.on("job_started", started.append)
    worker.on("job_completed", completed.append)
    if role == "handler":
        proxy.cut_after_commit("handler")
    worker.start(scheduler=False, maintenance=False, poll_interval=0.2)
    try:
        job_id = pq.add_job(queue=QUEUE, data={}).job_id
        assert job_id is not None
        wait_claimed(db, job_id)
        if role == "worker":
            # The job_started event reads the row on a worker connection too:
            # the trap is for the completion, so it is armed after that read.
            wait_until(lambda: started, 10, "the job_started event")
            # The completer's write is one statement in autocommit: it commits
            # as it runs, so losing its reply is the ambiguous commit. (Were
            # it followed by a COMMIT, this cut would come before it: the
            # write rolls back, and the retry must then complete the job.)
            proxy.cut_after_statement("worker", "output = d.output")
            go.set()
        row = wait_status(db, schema, job_id, {"completed", "failed", "pending"})
        wait_until(lambda: completed, 10, "the job_completed event")
    finally:
        go.set()
        worker.stop()
        worker.close()

    assert proxy.commits_trapped >= 1, "the completion was never cut"
    assert (row["status"], row["attempt"]) == ("completed", 1)
    assert [r["attempt"] for r in ledger(db, job_id)] == [1], "the handler ran again"
    assert len(effects(db, job_id)) == 1
    assert job(db, schema, job_id)["errors"] == []
    assert [s.job_id for s in completed] == [job_id]
    messages = [r.getMessage() for r in caplog.records]
    assert not [m for m in messages if "lease lost" in m or "refused" in m
                or (m.startswith("job ") and " failed" in m)], messages
    if role == "worker":  # the completer saw the cut and retried the write
        assert [m for m in messages if "writing 1 outcome(s) failed" in m], messages
    figures = assert_nothing_lost(db, schema, [job_id])
    report(figures, faults=f"1 COMMIT reply lost ({role})", reruns=figures.duplicates)


def test_a_transactional_commit_that_never_arrived_fails_the_attempt_and_runs_again(
    proxy: Proxy, pg_dsn: str, ledger_db: psycopg.Connection[Any], schema: str,
    pq: PortQueue, report: Any, caplog: pytest.LogCaptureFixture,
) -> None:
    """The other side of the same error: the handler's COMMIT is lost on the
    way (the link is cut before the server reads it). The worker sees exactly
    what it saw above; the row, still active under its lease token, says the
    commit did not land: the attempt fails (nothing of it was written) and the
    job runs again, its effect written once, by the second run."""
    db = ledger_db
    caplog.set_level(logging.INFO, logger="portqueue.worker")
    worker = PortQueue(proxy.dsn(pg_dsn), schema=schema, pool_min_size=0, pool_max_size=4)
    worker.handler(QUEUE, concurrency=1, lease_seconds=5,
                   retry={"max_attempts": 3})(ledger_handler(pg_dsn))
    proxy.cut_before_commit("handler")
    worker.start(scheduler=False, maintenance=False, poll_interval=0.2)
    try:
        job_id = pq.add_job(queue=QUEUE, data={}).job_id
        assert job_id is not None
        row = wait_status(db, schema, job_id, {"completed", "failed"})
    finally:
        worker.stop()
        worker.close()

    assert proxy.commits_trapped == 1, "the COMMIT was never cut"
    assert (row["status"], row["attempt"]) == ("completed", 2)
    assert [r["attempt"] for r in ledger(db, job_id)] == [1, 2]
    assert [e["attempt"] for e in effects(db, job_id)] == [2]
    assert [e["attempt"] for e in row["errors"]] == [1]
    assert not [r.getMessage() for r in caplog.records if "lease lost" in r.getMessage()]
    figures = assert_nothing_lost(db, schema, [job_id], faulted=[job_id])
    report(figures, faults="1 COMMIT lost before the server", reruns=figures.duplicates)
