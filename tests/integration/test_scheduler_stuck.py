"""Schedules the scheduler cannot advance, against real PostgreSQL (issue 16
item 3): a cron whose year field has run out spawns its last tick and is
disabled; a row whose next tick cannot be computed at all (a zone this host
does not have, a pattern written by SQL that no add accepts) is logged once
and never again holds one of the batch's slots, so every other schedule
still spawns. Such rows are written with SQL, as an older version or a hand
edit would have left them."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from portqueue import PortQueue
from portqueue.maintenance.scheduler import Scheduler
from tests.support.rows import db_now, schedule_row, spawned_jobs
from tests.support.services import service_pool, settings_for
from tests.support.waiting import wait_until

Db = psycopg.Connection[Any]
BATCH = Scheduler.default_batch_size


def add_schedules(pq: PortQueue, queue: str, count: int) -> list[str]:
    ids = []
    for _ in range(count):
        added = pq.add_job(queue=queue, data={}, schedule={"cron": "0 0 * * *"})
        assert added.schedule_id
        ids.append(added.schedule_id)
    return ids


def rewrite(db: Db, schema: str, queue: str, assignments: str) -> None:
    """Edit a queue's schedule rows in place, as SQL or an older version would."""
    db.execute(sql.SQL("UPDATE {} SET ").format(sql.Identifier(schema, "schedule"))
               + sql.SQL(assignments) + sql.SQL(" WHERE queue = %s"), [queue])


def finished_schedules(pq: PortQueue, db: Db, schema: str, count: int = BATCH) -> list[str]:
    """Schedules due at a tick after which their year field has no match; the
    oldest due rows, so a scheduler meets them first."""
    ids = add_schedules(pq, "finished", count)
    rewrite(db, schema, "finished",
            "cron = '0 0 1 1 * 0 2020', next_run_at = now() - interval '2 hours'")
    return ids


def broken_schedules(pq: PortQueue, db: Db, schema: str, count: int = BATCH) -> list[str]:
    """Schedules due whose next tick cannot be computed on this host: half in
    a zone it lacks, half with a pattern that is drawn anew at every read."""
    ids = add_schedules(pq, "broken", count)
    rewrite(db, schema, "broken",
            "tz = 'Mars/Olympus_Mons', next_run_at = now() - interval '1 hour'")
    db.execute(sql.SQL("UPDATE {} SET cron = 'R R * * *', tz = 'UTC' WHERE id = ANY(%s::uuid[])"
                       ).format(sql.Identifier(schema, "schedule")), [ids[::2]])
    return ids


def normal_schedule(pq: PortQueue, db: Db, schema: str, every: int) -> str:
    added = pq.add_job(queue="normal", data={}, schedule={"start_every_seconds": every})
    assert added.schedule_id
    rewrite(db, schema, "normal", "next_run_at = now() - interval '1 second'")
    return added.schedule_id


def passes(pg_dsn: str, schema: str, count: int) -> list[int]:
    """``count`` passes of one scheduler (what it remembers lasts between them)."""

    async def main() -> list[int]:
        async with service_pool(pg_dsn) as pool:
            scheduler = Scheduler(settings_for(pg_dsn, schema), pool)
            return [await scheduler.run_once() for _ in range(count)]

    return asyncio.run(main())


def mentions(caplog: pytest.LogCaptureFixture, ids: list[str]) -> Counter[str]:
    """How many scheduler records name each of ``ids``."""
    wanted = set(ids)
    return Counter(schedule_id for record in caplog.records
                   if record.name == "portqueue.scheduler"
                   for schedule_id in wanted if schedule_id in record.getMessage())


def test_a_finished_year_field_spawns_its_last_tick_then_is_disabled(
    pq: PortQueue, db: Db, pg_dsn: str, schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="portqueue.scheduler")
    finished = finished_schedules(pq, db, schema, count=3)
    ticks = {schedule_id: schedule_row(db, schema, schedule_id)["next_run_at"]
             for schedule_id in finished}

    assert passes(pg_dsn, schema, 3) == [3, 0, 0]
    for schedule_id in finished:
        (job,) = spawned_jobs(db, schema, schedule_id)
        assert job["scheduled_for"] == ticks[schedule_id]
        row = schedule_row(db, schema, schedule_id)
        assert row["enabled"] is False
        assert str(row["last_job_id"]) == str(job["id"])
        # next_run_at keeps the last tick: what get_schedules shows it ran for
        assert row["next_run_at"] == ticks[schedule_id]
    (shown,) = pq.get_schedules(queue="finished", enabled=False, limit=1).items
    assert shown.enabled is False
    assert mentions(caplog, finished) == dict.fromkeys(finished, 1)
    assert not [r for r in caplog.records if r.name == "portqueue.scheduler" and r.exc_info]


def test_rows_that_cannot_advance_never_starve_the_others(
    pq: PortQueue, db: Db, pg_dsn: str, schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A full batch of finished rows and another of broken ones, all older
    than the one good schedule's tick: the good one spawns in the first pass."""
    caplog.set_level(logging.INFO, logger="portqueue.scheduler")
    finished = finished_schedules(pq, db, schema)
    broken = broken_schedules(pq, db, schema)
    normal = normal_schedule(pq, db, schema, every=3600)

    assert passes(pg_dsn, schema, 3) == [BATCH + 1, 0, 0]
    assert len(spawned_jobs(db, schema, normal)) == 1
    assert schedule_row(db, schema, normal)["next_run_at"] > db_now(db)
    for schedule_id in broken:
        assert spawned_jobs(db, schema, schedule_id) == []
        row = schedule_row(db, schema, schedule_id)
        # left as it is, for a host that has the zone, and for a person to see
        assert row["enabled"] is True and row["next_run_at"] < db_now(db)
    # One line per schedule, however many passes meet it, and no traceback.
    assert mentions(caplog, finished + broken) == dict.fromkeys(finished + broken, 1)
    assert not [r for r in caplog.records if r.name == "portqueue.scheduler" and r.exc_info]


def test_a_worker_beside_a_batch_of_stuck_rows_keeps_spawning(
    db: Db, pg_dsn: str, schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="portqueue.scheduler")
    with PortQueue(pg_dsn, schema=schema) as client:
        broken = broken_schedules(client, db, schema)
        normal = normal_schedule(client, db, schema, every=1)
        client.start(queues=[], maintenance=False)
        try:
            # Three ticks of the good schedule are three passes or more.
            wait_until(lambda: len(spawned_jobs(db, schema, normal)) >= 3, timeout=30,
                       what="three jobs from the schedule beside the stuck rows")
        finally:
            client.stop()
    assert mentions(caplog, broken) == dict.fromkeys(broken, 1)


def test_a_worker_spawns_a_one_tick_cron_then_disables_it(
    db: Db, pg_dsn: str, schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Added through the API: its only tick is two seconds from now, by the
    database clock (the year field pins it)."""
    caplog.set_level(logging.INFO, logger="portqueue.scheduler")
    tick = (db_now(db) + timedelta(seconds=2)).replace(microsecond=0)
    pattern = (f"{tick.minute} {tick.hour} {tick.day} {tick.month} * "
               f"{tick.second} {tick.year}")
    with PortQueue(pg_dsn, schema=schema) as client:
        added = client.add_job(queue="once", data={}, schedule={"cron": pattern})
        assert added.schedule_id and added.next_run_at == tick
        client.start(queues=[], maintenance=False)
        try:
            wait_until(lambda: not schedule_row(db, schema, added.schedule_id)["enabled"],
                       timeout=30, what="the schedule to be disabled after its last tick")
        finally:
            client.stop()
    (job,) = spawned_jobs(db, schema, added.schedule_id)
    assert job["scheduled_for"] == tick
    assert mentions(caplog, [added.schedule_id]) == {added.schedule_id: 1}
