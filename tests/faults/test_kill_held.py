"""A worker SIGKILLed while it holds jobs claimed ahead (hold.py): they were
active with its lease, so the rescuer hands them out again as it does the
jobs that were running, and another worker finishes every one."""

from __future__ import annotations

import signal
from typing import Any

import psycopg
from psycopg import sql

from portqueue import PortQueue
from tests.faults.harness import Fleet
from tests.support.waiting import wait_until

APP = "tests.faults.hold_app:pq"
QUEUE = "hold"
RETRY = {"max_attempts": 3}


def rows(db: psycopg.Connection[Any], schema: str, ids: list[str]) -> list[tuple[Any, ...]]:
    return db.execute(sql.SQL(
        "SELECT id::text, status::text, started_at, attempt, errors FROM {} "
        "WHERE id = ANY(%s::uuid[])").format(sql.Identifier(schema, "job")), (ids,)).fetchall()


def test_a_killed_workers_held_jobs_are_rescued_like_its_running_ones(
    pq: PortQueue, fleet: Fleet, db: psycopg.Connection[Any], schema: str,
) -> None:
    first = fleet.worker("--claim-ahead", app=APP, HOLD_BLOCK="1")
    # Fast jobs first: the worker measures its handlers and its claims.
    warm = [j.job_id for j in pq.add_jobs(queue=QUEUE, jobs=[{"data": {}}] * 20)]
    wait_until(lambda: all(r[1] == "completed" for r in rows(db, schema, warm)), 20,
               "the warm-up jobs")
    # Two jobs that fill its two slots for good, then fast ones it claims ahead.
    batch = [j.job_id for j in pq.add_jobs(
        queue=QUEUE, jobs=[{"data": {"block": True}, "retry": RETRY}] * 2
        + [{"data": {}, "retry": RETRY}] * 10)]
    held = wait_until(lambda: [r for r in rows(db, schema, batch[2:])
                               if r[1] == "active" and r[2] is None] or None, 20,
                      "jobs held ahead: active, not started")
    first.send(signal.SIGKILL)
    assert first.wait(10) == -signal.SIGKILL
    fleet.worker(app=APP)  # maintenance on: its rescuer finds the lapsed leases
    wait_until(lambda: all(r[1] == "completed" for r in rows(db, schema, batch)), 40,
               "every job, held ones included, rescued and finished")
    for _, _, started_at, attempt, errors in rows(db, schema, [r[0] for r in held]):
        assert attempt == 2, "the held attempt was counted, as a running one's is"
        assert [e["type"] for e in errors] == ["LeaseExpired"]
        assert started_at is not None
