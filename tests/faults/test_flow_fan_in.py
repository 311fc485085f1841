"""SPEC §9 under a crash: a 1,000-job fan-in run by four worker processes, one
SIGKILLed mid-flow. The callback runs exactly once, only after every parent
completed (its release is part of the transaction completing the last
parent), and sees every parent's output; no parent is lost or done twice
except those the killed worker held."""

from __future__ import annotations

import signal
from typing import Any

import psycopg

from portqueue import PortQueue
from tests.faults.harness import QUEUE, Fleet, assert_nothing_lost, ledger, wait_status
from tests.support.rows import count_jobs
from tests.support.waiting import wait_until

APP = "tests.faults.flow_app:pq"
CALLBACK_QUEUE = "faults-callback"  # flow_app.py's (importing it needs its environment)
PARENTS = 1000


def test_a_fan_in_survives_a_sigkilled_worker_and_its_callback_runs_once(
    pq: PortQueue, fleet: Fleet, ledger_db: psycopg.Connection[Any], schema: str,
    report: Any,
) -> None:
    db = ledger_db
    keys = [f"p{n}" for n in range(PARENTS)]
    flow = pq.add_flow(jobs=[
        *({"key": key, "queue": QUEUE, "data": {"sleep": 0.01}, "retry": {"max_attempts": 5}}
          for key in keys),
        {"key": "callback", "queue": CALLBACK_QUEUE, "data": {}, "depends_on": keys},
    ])
    workers = [fleet.worker(app=APP, lease_seconds=2) for _ in range(4)]
    wait_until(lambda: count_jobs(db, schema, "status = 'completed'") >= PARENTS // 4,
               timeout=60, what="a quarter of the parents to complete")
    victim = workers[0]
    victim.send(signal.SIGKILL)
    assert victim.wait(10) == -signal.SIGKILL
    callback_id = flow.jobs["callback"].job_id
    assert callback_id is not None
    row = wait_status(db, schema, callback_id, {"completed", "failed", "cancelled"},
                      timeout=120, what="the callback to finish")

    assert row["status"] == "completed", row["errors"]
    assert row["output"]["unfinished_parents"] == 0
    assert row["output"]["keys"] == sorted(keys)
    assert row["output"]["outputs_from_attempts"] is True
    assert len([c for c in ledger(db, callback_id) if c["event"] == "claimed"]) == 1
    snapshot = pq.get_flow(flow_id=flow.flow_id)
    assert snapshot is not None and snapshot.status.value == "completed"
    ids = [result.job_id for result in flow.jobs.values() if result.job_id is not None]
    figures = assert_nothing_lost(db, schema, ids, faulted_pids={victim.pid})
    report(figures, faults="1 SIGKILL mid-flow", parents=PARENTS)
