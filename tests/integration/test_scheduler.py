"""SPEC §5 and §4.1, schedules: one job per tick however many schedulers run,
the database clock, misfires, cron in an IANA zone, removal, and what
get_schedules shows, against real PostgreSQL.

Schedulers run directly (``Scheduler.run_once`` / ``run``), in this process or
in subprocesses; outages are simulated by moving ``next_run_at`` back with SQL."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from portqueue import JobStatus, PauseMode, PortQueue
from portqueue.maintenance.scheduler import Scheduler
from tests.support.rows import count_rows, db_now, finish, schedule_row, spawned_jobs
from tests.support.services import run_once, service_pool, settings_for
from tests.support.waiting import wait_until

Db = psycopg.Connection[Any]
ROOT = Path(__file__).resolve().parents[2]


def spawn(dsn: str, schema: str, **options: Any) -> int:
    return int(run_once(Scheduler, dsn, schema, **options)[1])


def set_schedule(db: Db, schema: str, schedule_id: str, assignments: str) -> dict[str, Any]:
    query = (sql.SQL("UPDATE {} SET ").format(sql.Identifier(schema, "schedule"))
             + sql.SQL(assignments) + sql.SQL(" WHERE id = %s RETURNING *"))
    with db.cursor(row_factory=dict_row) as cursor:
        cursor.execute(query, [schedule_id])
        row = cursor.fetchone()
    assert row is not None
    return row


def make_due(db: Db, schema: str, schedule_id: str, ago: str = "1 second") -> datetime:
    """Pretend the schedule's tick passed ``ago``; returns that tick."""
    row = set_schedule(db, schema, schedule_id, f"next_run_at = now() - interval '{ago}'")
    return row["next_run_at"]  # type: ignore[no-any-return]


# --- one tick ---


def test_due_tick_spawns_one_job_from_the_template(
    pq: PortQueue, db: Db, pg_dsn: str, schema: str
) -> None:
    added = pq.add_job(
        queue="reports", data={"report": "daily"}, priority=7, group_id="nightly",
        retry={"max_attempts": 3, "delay_seconds": 5}, expire_in_seconds=600,
        retention={"ttl_seconds": 120}, timeout_seconds=30,
        schedule={"start_every_seconds": 60})
    assert added.schedule_id and added.job_id is None
    tick = make_due(db, schema, added.schedule_id)

    assert spawn(pg_dsn, schema) == 1
    (job,) = spawned_jobs(db, schema, added.schedule_id)
    assert job["status"] == "pending" and job["queue"] == "reports"
    assert job["data"] == {"report": "daily"}
    assert job["scheduled_for"] == tick and job["start_after"] == tick  # §4.1
    assert (job["priority"], job["group_id"], job["max_attempts"],
            job["retry_delay_seconds"], job["retention_ttl_seconds"],
            job["timeout_seconds"], job["expire_in_seconds"]) == (
                7, "nightly", 3, 5, 120, 30, 600)
    # expiry runs from when the job could first start, never before its creation
    assert job["expire_at"] >= job["created_at"] + timedelta(seconds=600)
    assert job["idempotency_key"] is None

    # Advanced on the interval's grid, and the snapshot names the schedule.
    row = schedule_row(db, schema, added.schedule_id)
    assert row["next_run_at"] == tick + timedelta(seconds=60)
    assert str(row["last_job_id"]) == str(job["id"])
    snapshot = pq.get_job(job_id=str(job["id"]))
    assert snapshot is not None and snapshot.schedule_id == added.schedule_id
    assert snapshot.scheduled_for == tick

    # Nothing is due any more: a second pass spawns nothing.
    assert spawn(pg_dsn, schema) == 0
    assert len(spawned_jobs(db, schema, added.schedule_id)) == 1


def test_get_schedules_shows_next_run_and_last_job(
    pq: PortQueue, db: Db, pg_dsn: str, schema: str
) -> None:
    added = pq.add_job(queue="reports", data={}, schedule={"start_every_seconds": 30})
    assert added.schedule_id
    (before,) = pq.get_schedules(queue="reports").items
    assert before.last_job_id is None and before.last_run_at is None
    tick = make_due(db, schema, added.schedule_id)

    assert spawn(pg_dsn, schema) == 1
    (job,) = spawned_jobs(db, schema, added.schedule_id)
    (after,) = pq.get_schedules(queue="reports").items
    assert after.schedule_id == added.schedule_id
    assert after.last_job_id == str(job["id"])
    assert after.next_run_at == tick + timedelta(seconds=30)
    assert after.next_run_at > db_now(db)
    assert after.last_run_at is not None and after.last_run_at >= tick


def test_job_options_resolve_against_the_queue_defaults_at_spawn(
    pq: PortQueue, db: Db, pg_dsn: str, schema: str
) -> None:
    added = pq.add_job(queue="reports", data={}, schedule={"start_every_seconds": 60})
    assert added.schedule_id
    db.execute(sql.SQL(
        "UPDATE {} SET max_attempts = 4, retry_delay_seconds = 9, timeout_seconds = 11 "
        "WHERE name = 'reports'").format(sql.Identifier(schema, "queue")))
    make_due(db, schema, added.schedule_id)
    assert spawn(pg_dsn, schema) == 1
    (job,) = spawned_jobs(db, schema, added.schedule_id)
    assert (job["max_attempts"], job["retry_delay_seconds"], job["timeout_seconds"]) == (4, 9, 11)
    assert job["retention_ttl_seconds"] is None  # resolved when pruning, as for add_job


@pytest.mark.parametrize("status", ["completed", "failed"])
def test_a_tick_spawned_again_after_its_job_finished_adds_no_second_job(
    pq: PortQueue, db: Db, pg_dsn: str, schema: str, status: str
) -> None:
    # A scheduler that read the schedule before the tick advanced (or a
    # restored backup) can meet a tick whose job is already history. The tick
    # key must hold for as long as the job is kept, not only while it is live:
    # the case a partitioned history (issue 24) keeps with schedule_tick.
    added = pq.add_job(queue="reports", data={}, schedule={"start_every_seconds": 60})
    assert added.schedule_id
    tick = make_due(db, schema, added.schedule_id)
    assert spawn(pg_dsn, schema) == 1
    (job,) = spawned_jobs(db, schema, added.schedule_id)
    finish(db, schema, str(job["id"]), status)

    query = sql.SQL("UPDATE {} SET next_run_at = %s WHERE id = %s").format(
        sql.Identifier(schema, "schedule"))
    db.execute(query, [tick, added.schedule_id])
    assert spawn(pg_dsn, schema) == 0
    (again,) = spawned_jobs(db, schema, added.schedule_id)
    assert again["id"] == job["id"] and again["status"] == status
    assert schedule_row(db, schema, added.schedule_id)["next_run_at"] > tick, "it advanced"


def test_a_schedule_not_yet_due_spawns_nothing(pq: PortQueue, db: Db, pg_dsn: str,
                                               schema: str) -> None:
    added = pq.add_job(queue="reports", data={}, schedule={"start_every_seconds": 60})
    assert added.schedule_id
    assert spawn(pg_dsn, schema) == 0
    assert count_rows(db, schema, "job") == 0
    set_schedule(db, schema, added.schedule_id, "next_run_at = now() - interval '1 s', "
                 "enabled = false")
    assert spawn(pg_dsn, schema) == 0, "a disabled schedule is never due"


# --- misfires: a scheduler outage ---


@pytest.mark.parametrize("mode", [{"start_every_seconds": 60}, {"cron": "* * * * *"}],
                         ids=["interval", "cron"])
def test_ten_minute_outage_spawns_one_job_on_resume(
    pq: PortQueue, db: Db, pg_dsn: str, schema: str, mode: dict[str, Any]
) -> None:
    added = pq.add_job(queue="minutely", data={}, schedule=mode)
    assert added.schedule_id
    # The outage: the schedule's tick is ten minutes old and nothing ran since.
    missed = set_schedule(db, schema, added.schedule_id,
                          "next_run_at = next_run_at - interval '10 minutes'")["next_run_at"]
    assert missed < db_now(db) - timedelta(minutes=9)

    assert spawn(pg_dsn, schema) == 1
    (job,) = spawned_jobs(db, schema, added.schedule_id)
    assert job["scheduled_for"] == missed, "the stored (earliest missed) tick is spawned"
    assert job["expire_at"] is None
    now = db_now(db)
    row = schedule_row(db, schema, added.schedule_id)
    assert now < row["next_run_at"] <= now + timedelta(minutes=1)
    if "start_every_seconds" in mode:
        assert (row["next_run_at"] - missed) % timedelta(minutes=1) == timedelta(0), "on the grid"
    else:
        assert row["next_run_at"].second == 0 and row["next_run_at"].microsecond == 0

    assert spawn(pg_dsn, schema) == 0, "the missed periods are not spawned one by one"
    assert len(spawned_jobs(db, schema, added.schedule_id)) == 1


@pytest.mark.parametrize("mode", [{"start_every_seconds": 60}, {"cron": "* * * * *"}],
                         ids=["interval", "cron"])
def test_a_misfire_grace_skips_a_tick_found_too_late(
    pq: PortQueue, db: Db, pg_dsn: str, schema: str, mode: dict[str, Any]
) -> None:
    added = pq.add_job(queue="minutely", data={},
                       schedule={**mode, "misfire_grace_seconds": 30})
    assert added.schedule_id
    (info,) = pq.get_schedules(queue="minutely").items
    assert info.misfire_grace_seconds == 30
    make_due(db, schema, added.schedule_id, "10 minutes")

    assert spawn(pg_dsn, schema) == 0, "ten minutes late is past a 30 s grace"
    assert spawned_jobs(db, schema, added.schedule_id) == []
    now = db_now(db)
    row = schedule_row(db, schema, added.schedule_id)
    assert now < row["next_run_at"] <= now + timedelta(minutes=1), "moved to the next tick"
    assert row["last_job_id"] is None

    # Within the grace, the tick is spawned as usual.
    tick = make_due(db, schema, added.schedule_id, "10 seconds")
    assert spawn(pg_dsn, schema) == 1
    (job,) = spawned_jobs(db, schema, added.schedule_id)
    assert job["scheduled_for"] == tick


@pytest.mark.parametrize("schedule", [
    {"start_every_seconds": 60, "misfire_grace_seconds": 0},
    {"start_every_seconds": 60, "misfire_grace_seconds": -5},
    {"start_every_seconds": 60, "misfire_grace_seconds": 1.5},
    {"start_after_seconds": 60, "misfire_grace_seconds": 30},
], ids=["zero", "negative", "float", "one-off"])
def test_a_bad_misfire_grace_is_refused_before_anything_is_written(
    pq: PortQueue, db: Db, schema: str, schedule: dict[str, Any]
) -> None:
    with pytest.raises(ValueError, match=r"schedule\.misfire_grace_seconds"):
        pq.add_job(queue="minutely", data={}, schedule=schedule)
    assert count_rows(db, schema, "schedule") == 0 and count_rows(db, schema, "job") == 0


def test_a_late_spawn_still_gets_its_whole_expiry_window(
    pq: PortQueue, db: Db, pg_dsn: str, schema: str
) -> None:
    added = pq.add_job(queue="minutely", data={}, expire_in_seconds=60,
                       schedule={"start_every_seconds": 60})
    assert added.schedule_id
    make_due(db, schema, added.schedule_id, "10 minutes")
    assert spawn(pg_dsn, schema) == 1
    (job,) = spawned_jobs(db, schema, added.schedule_id)
    assert job["expire_at"] >= job["created_at"] + timedelta(seconds=60)


# --- cron in an IANA zone ---


def next_local(now: datetime, zone: str, hour: int, minute: int) -> datetime:
    """The next hh:mm wall-clock time in ``zone`` after ``now`` (no croniter; no DST gap)."""
    tz = ZoneInfo(zone)
    local = now.astimezone(tz)
    day = local.date()
    while True:
        candidate = datetime(day.year, day.month, day.day, hour, minute, tzinfo=tz)
        if candidate > local:
            return candidate.astimezone(timezone.utc)
        day += timedelta(days=1)


@pytest.mark.parametrize("zone", ["America/New_York", "Asia/Kolkata", "Australia/Lord_Howe"])
def test_cron_in_a_non_utc_zone_gets_the_right_next_run_at(
    pq: PortQueue, db: Db, pg_dsn: str, schema: str, zone: str
) -> None:
    before = db_now(db)
    added = pq.add_job(queue="reports", data={},
                       schedule={"cron": {"pattern": "15 8 * * *", "tz": zone}})
    after = db_now(db)
    assert added.schedule_id and added.next_run_at is not None
    assert added.next_run_at in {next_local(before, zone, 8, 15), next_local(after, zone, 8, 15)}
    row = schedule_row(db, schema, added.schedule_id)
    assert row["tz"] == zone and row["cron"] == "15 8 * * *"
    local = row["next_run_at"].astimezone(ZoneInfo(zone))
    assert (local.hour, local.minute) == (8, 15)

    # After a spawn, the next tick is again 08:15 in the zone, after the DB's now.
    tick = set_schedule(db, schema, added.schedule_id,
                        "next_run_at = next_run_at - interval '1 day'")["next_run_at"]
    assert spawn(pg_dsn, schema) == 1
    (job,) = spawned_jobs(db, schema, added.schedule_id)
    assert job["scheduled_for"] == tick
    advanced = schedule_row(db, schema, added.schedule_id)["next_run_at"]
    assert advanced == next_local(db_now(db), zone, 8, 15)
    (info,) = pq.get_schedules(queue="reports").items
    assert info.next_run_at == advanced and info.tz == zone


# --- removal, pause, singleton ---


def test_remove_schedule_stops_spawning_at_once(
    pq: PortQueue, db: Db, pg_dsn: str, schema: str
) -> None:
    added = pq.add_job(queue="reports", data={}, schedule={"start_every_seconds": 60})
    assert added.schedule_id
    make_due(db, schema, added.schedule_id)
    assert spawn(pg_dsn, schema) == 1
    make_due(db, schema, added.schedule_id)

    assert pq.remove_schedule(schedule_id=added.schedule_id) is True
    assert spawn(pg_dsn, schema) == 0
    assert len(spawned_jobs(db, schema, added.schedule_id)) == 1, "jobs produced stay"
    assert pq.get_schedules(queue="reports").total == 0


async def test_remove_schedule_waits_for_a_spawn_in_flight_then_nothing_more(
    pg_dsn: str, schema: str, db: Db, pq: PortQueue
) -> None:
    # A scheduler holds the schedule row (mid-spawn); a removal issued then
    # waits for that spawn to commit, and no scheduler spawns after it.
    added = pq.add_job(queue="reports", data={}, schedule={"start_every_seconds": 60})
    assert added.schedule_id
    make_due(db, schema, added.schedule_id)
    settings = settings_for(pg_dsn, schema)
    async with await psycopg.AsyncConnection.connect(pg_dsn) as holder:
        await holder.execute(sql.SQL("SELECT 1 FROM {} WHERE id = %s FOR UPDATE").format(
            sql.Identifier(schema, "schedule")), [added.schedule_id])
        async with service_pool(pg_dsn) as pool:
            assert await Scheduler(settings, pool).run_once() == 0, "locked rows are skipped"
        remover = asyncio.create_task(asyncio.to_thread(
            pq.remove_schedule, schedule_id=added.schedule_id))
        await asyncio.sleep(0.3)
        assert not remover.done(), "the removal waits for the row lock"
        await holder.commit()
        assert await remover is True
    async with service_pool(pg_dsn) as pool:
        assert await Scheduler(settings, pool).run_once() == 0
    assert spawned_jobs(db, schema, added.schedule_id) == []


def test_a_queue_paused_for_adds_skips_ticks(
    pq: PortQueue, db: Db, pg_dsn: str, schema: str
) -> None:
    added = pq.add_job(queue="reports", data={}, schedule={"start_every_seconds": 60})
    assert added.schedule_id
    pq.pause_queue(queue="reports", mode=PauseMode.ALL)
    tick = make_due(db, schema, added.schedule_id)
    assert spawn(pg_dsn, schema) == 0
    row = schedule_row(db, schema, added.schedule_id)
    assert row["next_run_at"] > tick and row["last_job_id"] is None
    assert count_rows(db, schema, "job") == 0

    pq.pause_queue(queue="reports", mode=PauseMode.PROCESSING)  # adds accepted again
    make_due(db, schema, added.schedule_id)
    assert spawn(pg_dsn, schema) == 1


def test_a_singleton_template_skips_ticks_while_its_job_is_pending(
    pq: PortQueue, db: Db, pg_dsn: str, schema: str
) -> None:
    added = pq.add_job(queue="reports", data={}, singleton_key="report",
                       schedule={"start_every_seconds": 60})
    assert added.schedule_id
    make_due(db, schema, added.schedule_id)
    assert spawn(pg_dsn, schema) == 1
    make_due(db, schema, added.schedule_id)
    assert spawn(pg_dsn, schema) == 0, "the previous tick's job still holds the key"
    row = schedule_row(db, schema, added.schedule_id)
    assert row["next_run_at"] > db_now(db), "the schedule still advances"
    (job,) = spawned_jobs(db, schema, added.schedule_id)
    assert str(row["last_job_id"]) == str(job["id"])


def test_recurring_adds_dedup_on_idempotency_key(
    pq: PortQueue, db: Db, pg_dsn: str, schema: str
) -> None:
    first = pq.add_job(queue="reports", data={}, idempotency_key="nightly",
                       schedule={"start_every_seconds": 60})
    again = pq.add_job(queue="reports", data={}, idempotency_key="nightly",
                       schedule={"start_every_seconds": 60})
    assert again.deduplicated and again.schedule_id == first.schedule_id
    assert first.schedule_id
    make_due(db, schema, first.schedule_id)
    assert spawn(pg_dsn, schema) == 1
    assert count_rows(db, schema, "job") == 1


# --- inside a worker (SPEC §4.1: start() runs the scheduler unless scheduler=False) ---


def test_a_started_worker_spawns_and_runs_scheduled_jobs(
    pg_dsn: str, schema: str, db: Db
) -> None:
    with PortQueue(pg_dsn, schema=schema) as client:
        ran: list[str] = []
        client.handler("ticks")(lambda job: ran.append(job.id))
        added = client.add_job(queue="ticks", data={}, schedule={"start_every_seconds": 1})
        assert added.schedule_id
        client.start(maintenance=False)
        try:
            wait_until(lambda: count_rows(db, schema, "job", "status = 'completed'") >= 2,
                       timeout=10, what="two completed jobs")
        finally:
            client.stop()
    jobs = spawned_jobs(db, schema, added.schedule_id)
    assert {str(job["id"]) for job in jobs if job["status"] == "completed"} <= set(ran)
    instants = [job["scheduled_for"] for job in jobs]
    assert instants == [instants[0] + timedelta(seconds=n) for n in range(len(instants))]


def test_a_process_with_no_handler_runs_the_scheduler_with_queues_empty(
    pg_dsn: str, schema: str, db: Db
) -> None:
    """start(queues=[]): no queue consumed, the scheduler (and maintenance) run;
    the spawned jobs wait, pending, for workers elsewhere."""
    with PortQueue(pg_dsn, schema=schema) as client:
        with pytest.raises(ValueError, match="no queue has a handler"):
            client.start()
        with pytest.raises(ValueError, match="nothing to run"):
            client.start(queues=[], scheduler=False, maintenance=False)
        added = client.add_job(queue="ticks", data={}, schedule={"start_every_seconds": 1})
        assert added.schedule_id
        client.start(queues=[])
        try:
            wait_until(lambda: rows_of(db, schema, "worker"), timeout=10, what="a worker row")
            (worker,) = rows_of(db, schema, "worker")
            assert worker["queues"] == [] and worker["concurrency"] == 0
            wait_until(lambda: len(spawned_jobs(db, schema, added.schedule_id)) >= 2,
                       timeout=10, what="two spawned jobs")
        finally:
            client.stop()
    assert {job["status"] for job in spawned_jobs(db, schema, added.schedule_id)} == {"pending"}
    assert count_rows(db, schema, "worker") == 0


def rows_of(db: Db, schema: str, table: str) -> list[dict[str, Any]]:
    with db.cursor(row_factory=dict_row) as cursor:
        cursor.execute(sql.SQL("SELECT * FROM {}").format(sql.Identifier(schema, table)))
        return cursor.fetchall()


def test_a_worker_started_without_scheduler_spawns_nothing(
    pg_dsn: str, schema: str, db: Db
) -> None:
    with PortQueue(pg_dsn, schema=schema) as client:
        client.handler("ticks")(lambda job: None)
        added = client.add_job(queue="ticks", data={}, schedule={"start_every_seconds": 1})
        assert added.schedule_id
        make_due(db, schema, added.schedule_id)
        client.start(scheduler=False, maintenance=False)
        try:
            time.sleep(1.5)
        finally:
            client.stop()
    assert count_rows(db, schema, "job") == 0


# --- many schedulers at once ---


async def test_concurrent_schedulers_spawn_each_due_tick_once(
    pq: PortQueue, db: Db, pg_dsn: str, schema: str
) -> None:
    ids = [pq.add_job(queue="fan", data={"n": n}, schedule={"start_every_seconds": 60}).schedule_id
           for n in range(150)]
    db.execute(sql.SQL("UPDATE {} SET next_run_at = now() - interval '1 s'").format(
        sql.Identifier(schema, "schedule")))
    settings = settings_for(pg_dsn, schema)
    pools = [service_pool(pg_dsn) for _ in range(8)]
    for pool in pools:
        await pool.open(wait=True)
    try:
        # Small batches so the schedulers interleave many transactions.
        counts = await asyncio.gather(*[
            Scheduler(settings, pool, batch_size=7).run_once() for pool in pools])
    finally:
        for pool in pools:
            await pool.close()
    assert sum(counts) == 150
    assert count_rows(db, schema, "job") == 150
    assert count_rows(db, schema, "job", "schedule_id = ANY(%s)", [ids]) == 150


EXACTLY_ONCE_PROCESS = """
import asyncio, sys, threading
from portqueue.maintenance.scheduler import Scheduler
from tests.support.services import service_pool, settings_for

dsn, schema = sys.argv[1], sys.argv[2]
stop = threading.Event()

def watch_stdin():
    sys.stdin.read()  # the test closes our stdin to stop us
    stop.set()

async def main():
    async with service_pool(dsn) as pool:
        # A short interval so five of these contend on every tick.
        scheduler = Scheduler(settings_for(dsn, schema), pool, interval=0.02)
        spawned = 0
        run_once = scheduler.run_once

        async def counting():
            nonlocal spawned
            count = await run_once()
            spawned += count
            return count

        scheduler.run_once = counting
        threading.Thread(target=watch_stdin, daemon=True).start()
        print("ready", flush=True)
        await scheduler.run(stop.is_set)
        print(f"spawned {spawned}", flush=True)

asyncio.run(main())
"""

PROCESSES = 5
# Each tick is a second of wall time; at a 0.02 s interval the five processes
# contend about fifty times a tick, so ten ticks are some 2,500 contended passes.
TICKS = 10


@pytest.mark.slow
def test_five_processes_ten_ticks_exactly_ten_jobs(
    pq: PortQueue, db: Db, pg_dsn: str, schema: str
) -> None:
    added = pq.add_job(queue="every-second", data={}, schedule={"start_every_seconds": 1})
    assert added.schedule_id
    set_schedule(db, schema, added.schedule_id, "enabled = false")
    procs = [subprocess.Popen(
        [sys.executable, "-c", EXACTLY_ONCE_PROCESS, pg_dsn, schema], cwd=ROOT,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for _ in range(PROCESSES)]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        # Every scheduler is running: start the grid on the next whole second.
        first = set_schedule(db, schema, added.schedule_id,
                             "enabled = true, next_run_at = date_trunc('second', now()) "
                             "+ interval '1 second'")["next_run_at"]
        last = first + timedelta(seconds=TICKS - 1)
        # Let them run a second past the last tick.
        time.sleep(max((last - db_now(db)).total_seconds() + 1.0, 0))
    finally:
        for proc in procs:  # stop them all at once, then collect
            assert proc.stdin is not None
            proc.stdin.close()
        outputs = []
        for proc in procs:
            assert proc.stdout is not None
            outputs.append(proc.stdout.read())
            proc.wait(timeout=30)
    assert all(proc.returncode == 0 for proc in procs), outputs
    per_process = [int(out.split()[-1]) for out in outputs]

    jobs = spawned_jobs(db, schema, added.schedule_id)
    instants = [job["scheduled_for"] for job in jobs]
    in_window = [t for t in instants if first <= t <= last]
    assert len(in_window) == TICKS, f"{len(in_window)} jobs for {TICKS} ticks"
    assert len(set(instants)) == len(instants), "a tick spawned twice"
    # No tick missed or invented: the spawned instants are exactly the grid.
    assert instants == [first + timedelta(seconds=n) for n in range(len(instants))]
    assert sum(per_process) == len(jobs), f"processes claim {per_process}, table has {len(jobs)}"
    row = schedule_row(db, schema, added.schedule_id)
    assert row["next_run_at"] == instants[-1] + timedelta(seconds=1)
    assert all(job["status"] == JobStatus.PENDING.value for job in jobs)
    print(f"\n{PROCESSES} processes, {TICKS} ticks in window: {len(in_window)} jobs; "
          f"{len(jobs)} in all; spawned per process {per_process}")
