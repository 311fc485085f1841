"""A worker consuming several queues wakes each one on its own (issue 22):
a freed slot of a queue whose last claim was full claims it again at once,
whatever the worker's other queues returned, and a NOTIFY claims only the
queue it names.

The poll interval is 30 s throughout, so a poll cannot be what claimed a job:
every wait below has a deadline far shorter than that. Nothing is timed."""

from __future__ import annotations

from typing import Any

import psycopg

from tests.support.waiting import wait_until
from tests.support.workers import SyncHarness, finished_row, row_where

Db = psycopg.Connection[Any]
POLL = 30.0
# Far shorter than POLL: reaching it means something waited for the poll.
DEADLINE = 10.0


def statuses(db: Db, schema: str, queue: str) -> dict[str, int]:
    rows = db.execute(
        psycopg.sql.SQL("SELECT status, count(*) FROM {}.job WHERE queue = %s GROUP BY 1")
        .format(psycopg.sql.Identifier(schema)), [queue]).fetchall()
    return {row[0]: row[1] for row in rows}


def test_a_freed_slot_of_a_full_queue_claims_it_whatever_the_other_queues_returned(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    pq = harness.pq
    gate = harness.gate()

    @pq.handler("busy", concurrency=2)
    def busy(job: Any) -> None:
        gate.wait(20)

    pq.create_queue(queue="idle-a", handler=lambda job: None)

    @pq.handler("idle-b", concurrency=3)
    def idle_b(job: Any) -> None:
        return None

    pq.add_jobs(queue="busy", jobs=[{"data": n} for n in range(6)])
    harness.start(poll_interval=POLL)
    # The first claim fills both slots of "busy" (more are waiting) and finds
    # the other two queues empty.
    wait_until(lambda: statuses(db, schema, "busy").get("active") == 2, timeout=DEADLINE,
               what="the first claim to fill the busy queue")
    # A claim of the other queues alone comes back short: it must not make
    # the worker forget that "busy" has more waiting.
    job_id = pq.add_job(queue="idle-b", data="notified").job_id
    assert job_id
    wait_until(lambda: finished_row(db, schema, job_id), timeout=DEADLINE,
               what="the job NOTIFY woke on an idle queue")
    # Freed slots of "busy" claim its next jobs at once, without the poll.
    gate.set()
    wait_until(lambda: statuses(db, schema, "busy") == {"completed": 6}, timeout=DEADLINE,
               what="every busy job to complete before the 30 s poll")


def test_a_notify_claims_only_the_queue_it_names(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    pq = harness.pq
    pq.create_queue(queue="named", handler=lambda job: None)
    pq.create_queue(queue="unnamed", handler=lambda job: None)
    harness.start(poll_interval=POLL)
    wait_until(lambda: db.execute(
        "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() "
        "AND application_name = 'portqueue:listener' AND state = 'idle'").fetchone(),
        timeout=DEADLINE, what="the LISTEN connection")
    # Due in a moment, and added no later: no NOTIFY will name its queue
    # when it falls due (a NOTIFY is sent when a job is ready at commit).
    later = pq.add_job(queue="unnamed", data="due soon",
                       schedule={"start_after_seconds": 1}).job_id
    assert later
    wait_until(lambda: row_where(db, schema, later, "start_after <= now()"),
               timeout=DEADLINE, what="the unnamed queue's job to fall due")
    named = pq.add_job(queue="named", data="notified").job_id
    assert named
    wait_until(lambda: finished_row(db, schema, named), timeout=DEADLINE,
               what="the job on the queue the NOTIFY named")
    # The claim the NOTIFY caused asked for its own queue only.
    assert row_where(db, schema, later, "status = 'pending'"), (
        "a NOTIFY for one queue claimed another queue's job")
