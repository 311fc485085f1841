"""The scheduler: spawns one job per tick of every recurring schedule.

Runs in every worker (unless started with ``scheduler=False``); any number of
schedulers may run at once. Exactly one job per tick, however many run:

- due schedules are locked ``FOR UPDATE SKIP LOCKED``, so two schedulers never
  work on one schedule at the same time (and never wait for each other);
- the job for tick ``next_run_at`` is inserted with ``ON CONFLICT DO NOTHING``
  against the unique ``(schedule_id, scheduled_for)`` key, in the same
  transaction that advances ``next_run_at``, so a tick is spawned and
  consumed together or not at all.

Due-ness and the next tick come from the database clock (``now()``), never
this process's.

Misfires: a schedule found due with ticks missed (no scheduler ran during an
outage) spawns one job, for the tick stored in ``next_run_at`` (the earliest
missed one: its ``scheduled_for`` and ``start_after`` say when it was due),
then moves to the first tick after now. The ticks in between are dropped, not
spawned one per missed period. A schedule with ``misfire_grace_seconds`` skips
that one job too when its tick is found more than that many seconds late.
Interval schedules stay on their grid (``first tick + k * every``), so a late
pass never drifts later ticks.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta, timezone
from typing import Any

from portqueue.driver import execute_async
from portqueue.ids import uuid7
from portqueue.maintenance.service import STATEMENT_TIMEOUT_MS, Service
from portqueue.operations import next_run_at
from portqueue.types import CronSpec, Schedule

log = logging.getLogger("portqueue.scheduler")



def next_tick(
    *, cron: str | None, tz: str, every_seconds: int | None, tick: datetime, now: datetime
) -> datetime:
    """The schedule's first tick strictly after ``now``, given its current ``tick``.

    Interval schedules keep to the grid ``tick + k * every_seconds``; cron
    schedules take croniter's next match after ``now`` in the IANA zone ``tz``
    (so DST gaps and repeated hours behave exactly as croniter defines: a
    02:30 that does not exist fires at 03:00, a repeated 01:30 fires twice).
    """
    if every_seconds is not None:
        every = timedelta(seconds=every_seconds)
        if now < tick:
            return tick.astimezone(timezone.utc)
        return (tick + every * ((now - tick) // every + 1)).astimezone(timezone.utc)
    if cron is None:
        raise ValueError("a schedule has a cron pattern or an interval")
    # The same function computes a new schedule's first tick, so the two agree.
    return next_run_at(Schedule(cron=CronSpec(pattern=cron, tz=tz)), now)


class Scheduler(Service):
    """Spawns due ticks: ``run(stopping)`` loops, ``run_once()`` is one pass.

    ``interval`` (default 1 s, jittered ±20 %) caps the sleep between passes; a
    pass sleeps less when a schedule falls due sooner. ``batch_size`` (default
    100) schedules are locked and spawned per transaction. It takes no
    advisory lock: due rows are locked FOR UPDATE SKIP LOCKED, so several
    schedulers share the work and the tick's unique key keeps spawns single.
    """

    name = "scheduler"
    interval_seconds = 1.0
    default_batch_size = 100
    done = "spawned %d scheduled job(s)"
    _next_due: float | None = None

    def next_sleep(self) -> float:
        # Until the earliest schedule is due, at most one jittered interval
        # (a schedule added meanwhile waits no longer than that).
        delay = super().next_sleep()
        if self._next_due is not None:
            delay = max(min(delay, self._next_due), 0.001)
        return delay

    def after_error(self) -> None:
        self._next_due = None

    async def run_once(self) -> int:
        """One pass: spawn the due ticks in batches; returns the jobs spawned."""
        total = 0
        while True:
            async with self.transaction() as conn:
                await execute_async(conn, self.q(
                    "set_statement_timeout", milliseconds=str(STATEMENT_TIMEOUT_MS)))
                due = await execute_async(conn, self.q(
                    "lock_due_schedules", limit=self.batch_size))
                ticks = [tick for tick in map(self._advance, due) if tick is not None]
                if ticks:
                    rows = await execute_async(conn, self.q(
                        "spawn_scheduled_jobs", ticks=json.dumps(ticks)))
                    total += self._report(rows)
                (row,) = await execute_async(conn, self.q("next_schedule_due"))
                self._next_due = row["seconds"]
            # A full batch of good rows means more may be due; a row that could
            # not be advanced stays due, so it ends the pass rather than loop.
            if len(ticks) < self.batch_size:
                return total

    def _advance(self, row: dict[str, Any]) -> dict[str, str] | None:
        """The tick to spawn for one locked schedule row, and the one after it."""
        try:
            following = next_tick(cron=row["cron"], tz=row["tz"],
                                  every_seconds=row["every_seconds"],
                                  tick=row["next_run_at"], now=row["now"])
        except Exception:
            # One broken row (a zone missing from this host's tz database, say)
            # must not stop every other schedule: it stays due and is logged.
            log.exception("schedule %s: cannot compute its next tick", row["id"])
            return None
        return {
            "schedule_id": str(row["id"]),
            "job_id": uuid7(),
            "scheduled_for": row["next_run_at"].isoformat(),
            "next_run_at": following.isoformat(),
            "spawn": not self._misfired(row),
        }

    @staticmethod
    def _misfired(row: dict[str, Any]) -> bool:
        """Whether the tick is later than its schedule's misfire grace allows."""
        grace = row["misfire_grace_seconds"]
        late = (row["now"] - row["next_run_at"]).total_seconds()
        if grace is None or late <= grace:
            return False
        log.info("schedule %s: tick %s skipped, found %.0f s late (misfire grace %d s)",
                 row["id"], row["next_run_at"].isoformat(), late, grace)
        return True

    def _report(self, rows: list[dict[str, Any]]) -> int:
        spawned = 0
        for row in rows:
            if row["job_id"] is not None:
                spawned += 1
            elif row["paused"]:
                log.info("schedule %s: tick %s skipped, its queue is paused (all)",
                         row["schedule_id"], row["scheduled_for"].isoformat())
            else:
                log.info("schedule %s: tick %s skipped, its job already exists or its "
                         "singleton key is taken", row["schedule_id"],
                         row["scheduled_for"].isoformat())
        return spawned
