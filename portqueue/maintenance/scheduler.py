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

A cron whose year field is over spawns its last tick, then its schedule is
disabled. A row whose next tick cannot be computed here (a zone this host
lacks, a pattern no add accepts) is logged once and passed over by this
process from then on, so it never holds a batch's slot.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone
from typing import Any

from psycopg_pool import AsyncConnectionPool

from portqueue import maintenance_operations as ops
from portqueue.cron import next_match
from portqueue.driver import execute_async
from portqueue.ids import uuid7
from portqueue.maintenance.service import STATEMENT_TIMEOUT_MS, Service
from portqueue.settings import Settings

log = logging.getLogger("portqueue.scheduler")

# What a stored pattern or zone this host cannot read raises: croniter's
# errors and R/H are ValueErrors, a missing zone is a KeyError
# (ZoneInfoNotFoundError), a zone path that is a directory an OSError.
UNREADABLE = (ValueError, KeyError, OSError)


def next_tick(
    *, cron: str | None, tz: str, every_seconds: int | None, tick: datetime, now: datetime
) -> datetime | None:
    """The schedule's first tick strictly after ``now``, given its current ``tick``;
    None when it has none (a cron whose year field is over).

    Interval schedules keep to the grid ``tick + k * every_seconds``; cron
    schedules take croniter's next match after ``now`` in the IANA zone ``tz``
    (so DST gaps and repeated hours behave exactly as croniter defines: a
    02:30 that does not exist fires at 03:00, a repeated 01:30 fires twice).
    Raises ``ValueError`` (or ``ZoneInfoNotFoundError``, ``OSError``) for a
    stored pattern or zone that cannot be read here.
    """
    if every_seconds is not None:
        every = timedelta(seconds=every_seconds)
        if now < tick:
            return tick.astimezone(timezone.utc)
        return (tick + every * ((now - tick) // every + 1)).astimezone(timezone.utc)
    if cron is None:
        raise ValueError("a schedule has a cron pattern or an interval")
    # The same function computes a new schedule's first tick, so the two agree.
    return next_match(cron, tz, now)


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

    def __init__(self, settings: Settings, pool: AsyncConnectionPool[Any],
                 interval: float | None = None, batch_size: int | None = None) -> None:
        super().__init__(settings, pool, interval, batch_size)
        # Schedules whose next tick this process cannot compute (a zone its tz
        # database lacks, a pattern no add accepts, written by SQL or an older
        # version). Each is logged once and passed over from then on: left
        # due, it would be locked again by every pass, logged every second,
        # and a batch full of them would keep every other schedule waiting.
        self._passed_over: set[str] = set()

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
        if not await self._due():
            return 0
        total = 0
        while True:
            async with self.transaction() as conn:
                await execute_async(conn, ops.set_statement_timeout(
                    self.q, milliseconds=STATEMENT_TIMEOUT_MS))
                due = await execute_async(conn, ops.lock_due_schedules(
                    self.q, limit=self.batch_size, passed_over=self._passed_over))
                ticks = [tick for tick in map(self._advance, due) if tick is not None]
                if ticks:
                    rows = await execute_async(conn, ops.spawn_scheduled_jobs(self.q, ticks))
                    total += self._report(rows)
                self._next_due = ops.seconds_until_due(
                    await execute_async(conn, ops.next_schedule_due(self.q)))
            # A full batch means more may be due. Every row of it was either
            # advanced, disabled or passed over from now on, so the next batch
            # holds other rows and the loop ends.
            if len(due) < self.batch_size:
                return total

    async def _due(self) -> bool:
        """Whether a schedule this process can advance is due now, in one
        statement; if none is, the pass ends there and the next one comes when
        the earliest is due (at most an interval later: a schedule added
        meanwhile waits no longer than that)."""
        async with self.connection() as conn:
            seconds = ops.seconds_until_due(await execute_async(conn, ops.schedule_due_in(
                self.q, passed_over=self._passed_over)))
            if not conn.autocommit:  # a pool of the caller's (tests, tools)
                await conn.commit()
        if seconds is not None and seconds <= 0:
            return True
        self._next_due = seconds
        return False

    def _advance(self, row: dict[str, Any]) -> ops.Tick | None:
        """The tick to spawn for one locked schedule row, and the one after it
        (None: it was the last, and the schedule is disabled)."""
        try:
            following = next_tick(cron=row["cron"], tz=row["tz"],
                                  every_seconds=row["every_seconds"],
                                  tick=row["next_run_at"], now=row["now"])
        except Exception as exc:
            # Logged once: the row stays as it is, for a scheduler on a host
            # that can read it and for whoever fixes or removes it. A pattern
            # or zone this host cannot read needs no traceback; anything else
            # is a bug, and gets one.
            self._passed_over.add(str(row["id"]))
            log.error("schedule %s: cannot compute its next tick (%s: %s); this scheduler "
                      "passes over it until it restarts", row["id"], type(exc).__name__, exc,
                      exc_info=not isinstance(exc, UNREADABLE))
            return None
        if following is None:
            log.info("schedule %s: tick %s is its last (its cron has no later match); "
                     "the schedule is disabled", row["id"], row["next_run_at"].isoformat())
        return ops.Tick(schedule_id=str(row["id"]), job_id=uuid7(),
                        scheduled_for=row["next_run_at"], next_run_at=following,
                        spawn=not self._misfired(row))

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
