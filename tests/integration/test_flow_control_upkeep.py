"""Flow control without a side read of the limits (SPEC §8): a worker learns that
a queue gained or lost its limits from its claims, a changed limit wakes the
queue's workers, ``fetch_jobs`` follows a limit set after its first fetch, and
maintenance forgets ended throttle windows in bounded batches; a slot freed by
another session wakes a worker waiting for one, and a worker's batched
completions send that wake-up once per queue.

The workers poll every 30 s here, and their jobs block on gates, so nothing but
the claims and the wake-ups under test can make them claim again in time.
"""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest
from psycopg import sql

from portqueue import PortQueue, Throttle
from portqueue import worker_operations as ops
from portqueue.driver import execute_sync
from portqueue.maintenance.throttles import ThrottlePruner
from portqueue.worker.job import Job
from tests.pgbouncer import mode
from tests.support.services import run_once
from tests.support.waiting import wait_until
from tests.support.workers import SyncHarness

Db = psycopg.Connection[Any]
SLOW_POLL = 30.0


def active(db: Db, schema: str, queue: str, *, limited: bool | None = None) -> int:
    condition = sql.SQL("") if limited is None else sql.SQL(" AND limited = {}").format(limited)
    (n,) = db.execute(sql.SQL(
        "SELECT count(*) FROM {} WHERE queue = %s AND status = 'active'{}").format(
            sql.Identifier(schema, "job"), condition), [queue]).fetchone() or (0,)
    return int(n)


def listening(db: Db) -> bool:
    """Whether a worker's listener has run LISTEN (its session shows it, or the
    health probe that follows)."""
    (n,) = db.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND application_name LIKE '%%:listener' "
        "AND (query LIKE 'LISTEN %%' OR query = 'SELECT 1')").fetchone() or (0,)
    return int(n) > 0


@pytest.fixture
def woken(harness: SyncHarness) -> SyncHarness:
    """The harness, for a test of wake-ups: a poll_only worker (PgBouncer)
    hears none, and follows what they signal only at its poll."""
    if mode.poll_only():
        pytest.skip("poll_only workers hear no wake-up: they claim at their poll")
    return harness


def blocking_queue(client: PortQueue, harness: SyncHarness, queue: str, **options: Any) -> None:
    gate = harness.gate()

    def handler(job: Job) -> None:
        gate.wait(30)

    client.create_queue(queue=queue, handler=handler, concurrency=10, **options)


def test_a_limit_set_on_a_queue_claimed_plainly_holds_from_the_next_claim(
    client: PortQueue, woken: SyncHarness, db: Db, schema: str,
) -> None:
    blocking_queue(client, woken, "later")
    client.add_jobs(queue="later", jobs=[{"data": n} for n in range(2)])
    woken.start(poll_interval=SLOW_POLL)
    wait_until(lambda: active(db, schema, "later") == 2, 10, "two unlimited jobs running")
    client.set_queue_limits(queue="later", global_concurrency=3)
    # The plain claim passes over the queue now, and says so: the worker
    # claims it the limited way at once, up to the limit and no further (the
    # two jobs started before the queue had a limit do not count against it).
    client.add_jobs(queue="later", jobs=[{"data": n} for n in range(5)])
    wait_until(lambda: active(db, schema, "later", limited=True) == 3, 5,
               "three jobs claimed within the limit")
    for _ in range(20):
        assert active(db, schema, "later", limited=True) <= 3
    assert active(db, schema, "later") == 5


def test_a_changed_limit_wakes_a_worker_waiting_for_a_slot(
    client: PortQueue, woken: SyncHarness, db: Db, schema: str,
) -> None:
    blocking_queue(client, woken, "raised", global_concurrency=2)
    client.add_jobs(queue="raised", jobs=[{"data": n} for n in range(8)])
    woken.start(poll_interval=SLOW_POLL)
    wait_until(lambda: active(db, schema, "raised") == 2, 10, "two jobs at the limit")
    # No job finishes, so no slot frees: only the change's wake-up can do it.
    client.set_queue_limits(queue="raised", global_concurrency=5)
    wait_until(lambda: active(db, schema, "raised") == 5, 5, "five once the limit is raised")
    # Removed: the limited claim says the queue has none left, and takes the rest.
    client.set_queue_limits(queue="raised", global_concurrency=None)
    wait_until(lambda: active(db, schema, "raised") == 8, 5, "every job once it is removed")
    # From then on the plain claim takes the queue's jobs (not marked limited).
    client.add_jobs(queue="raised", jobs=[{"data": n} for n in range(2)])
    wait_until(lambda: active(db, schema, "raised") == 10, 5, "new jobs claimed plainly")
    assert active(db, schema, "raised", limited=True) == 8


def test_a_slot_freed_by_another_session_wakes_a_worker_waiting_for_it(
    client: PortQueue, woken: SyncHarness, db: Db, schema: str,
) -> None:
    blocking_queue(client, woken, "freed", global_concurrency=2)
    # On the row now, not at the worker's start: the pull consumer's job counts.
    client.set_queue_limits(queue="freed", global_concurrency=2)
    client.add_job(queue="freed", data="pulled")
    (pulled,) = client.fetch_jobs(queue="freed", limit=1)  # holds one of the two slots
    client.add_jobs(queue="freed", jobs=[{"data": n} for n in range(3)])
    woken.start(poll_interval=SLOW_POLL)
    wait_until(lambda: active(db, schema, "freed") == 2, 10, "the worker at the limit")
    # Its listener is up, and the claim of all its queues that follows LISTEN
    # has run (it found the limit reached).
    wait_until(lambda: listening(db), 10, "the worker's LISTEN")
    time.sleep(0.5)
    # The worker's jobs block, so it frees no slot and writes no outcome (no
    # refill): only the NOTIFY of the pull consumer's completion can make it
    # claim again before its poll, 30 s away.
    assert client.complete_job(job_id=pulled.job_id, lease_token=pulled.lease_token)
    wait_until(lambda: active(db, schema, "freed") == 2, 5, "the freed slot claimed")
    assert active(db, schema, "freed", limited=True) == 2


def test_fetch_jobs_follows_a_limit_set_and_removed_after_its_first_fetch(
    client: PortQueue, db: Db, schema: str,
) -> None:
    client.add_jobs(queue="pulled", jobs=[{"data": n} for n in range(2)])
    assert len(client.fetch_jobs(queue="pulled", limit=1)) == 1
    client.set_queue_limits(queue="pulled", global_concurrency=2)
    client.add_jobs(queue="pulled", jobs=[{"data": n} for n in range(4)])
    # The job fetched before the limit was set does not count against it.
    assert len(client.fetch_jobs(queue="pulled", limit=10)) == 2, "up to the limit"
    assert client.fetch_jobs(queue="pulled", limit=10) == []
    client.set_queue_limits(queue="pulled", global_concurrency=None)
    assert len(client.fetch_jobs(queue="pulled", limit=2)) == 2
    assert len(client.fetch_jobs(queue="pulled", limit=10)) == 1
    assert active(db, schema, "pulled") == 6
    # The last one was claimed plainly again: the client saw the limit go.
    assert active(db, schema, "pulled", limited=True) == 4


def windows(db: Db, schema: str) -> list[str]:
    return [key for (key,) in db.execute(sql.SQL(
        "SELECT key FROM {} ORDER BY key").format(
            sql.Identifier(schema, "throttle_window"))).fetchall()]


def test_maintenance_forgets_ended_throttle_windows_in_batches(
    client: PortQueue, db: Db, pg_dsn: str, schema: str,
) -> None:
    for n in range(5):
        client.add_job(queue="throttled", data=n, throttle=Throttle(key=f"k{n}", seconds=3600))
    # Four windows ended (as if an hour had passed); k4's is still open.
    db.execute(sql.SQL("UPDATE {} SET window_ends_at = now() - interval '1 s' "
                       "WHERE key <> 'k4'").format(sql.Identifier(schema, "throttle_window")))

    _, forgotten = run_once(ThrottlePruner, pg_dsn, schema, batch_size=3)

    assert forgotten == 4, "two batches: three, then one"
    assert windows(db, schema) == ["k4"]
    # The open window still throttles; an ended key's next add opens a new one.
    assert client.add_job(queue="throttled", data=9,
                          throttle=Throttle(key="k4", seconds=3600)).deduplicated
    assert not client.add_job(queue="throttled", data=9,
                              throttle=Throttle(key="k0", seconds=3600)).deduplicated
    assert windows(db, schema) == ["k0", "k4"]
    _, again = run_once(ThrottlePruner, pg_dsn, schema)
    assert again == 0


def test_a_workers_completions_wake_the_waiting_workers_once_per_queue(
    client: PortQueue, pg_dsn: str, db: Db, schema: str,
) -> None:
    """The worker names the limited queues of its batch: complete_jobs sends
    their wake-up itself and turns the flag off, so the row trigger (one
    PL/pgSQL call per job) does not run for them; a limited job of a queue it
    does not name still wakes through the trigger, its flag left on."""
    if mode.poll_only():
        pytest.skip("LISTEN through PgBouncer in transaction mode hears nothing")
    client.add_jobs(queue="named", jobs=[{"data": n} for n in range(3)])
    client.add_jobs(queue="unnamed", jobs=[{"data": n} for n in range(2)])
    for queue in ("named", "unnamed"):
        client.set_queue_limits(queue=queue, global_concurrency=5)
    fetched = [*client.fetch_jobs(queue="named", limit=3),
               *client.fetch_jobs(queue="unnamed", limit=2)]
    assert active(db, schema, "named", limited=True) == 3
    q = client._settings.queries
    entries = [ops.completion_entry(job.job_id, job.lease_token, status="completed",
                                    output_json="null") for job in fetched]
    with psycopg.connect(pg_dsn, autocommit=True) as listener:
        listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(q.job_channel)))
        (row,) = execute_sync(db, ops.complete_jobs(q, entries, slots_freed_queues={"named"}))
        woken = [n.payload for n in listener.notifies(timeout=2, stop_after=2)]
    assert sorted(woken) == ["named", "unnamed"]
    assert len(row["ids"]) == 5
    flags = dict(db.execute(sql.SQL(
        "SELECT queue, bool_or(limited) FROM {} WHERE status = 'completed' GROUP BY queue"
    ).format(sql.Identifier(schema, "job"))).fetchall())
    assert flags == {"named": False, "unnamed": True}
