"""Cron patterns from anywhere (issue 16 items 3, 4 and 11): standard fields,
croniter's extensions (seconds, a year, L, W, #, ?, names, @aliases), its
drawn R and H fields, and malformed fields, in zones with odd DST rules.

Every pattern the validator accepts must yield a year of ticks from now
that are strictly increasing, that end only where the pattern has no later
match, and that come out the same when computed twice: the scheduler
recomputes the next tick at every tick, so a pattern read differently each
time ("R R * * *") fires at random. Where the database matters, an accepted
pattern is added and its stored first tick and the tick a scheduler pass
advances it to are ticks of that same walk. Everything else is refused with
a ValueError naming the pattern, and nothing is written.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
from hypothesis import example, given
from hypothesis import strategies as st
from psycopg import sql

from portqueue import PortQueue
from portqueue.maintenance.scheduler import Scheduler, next_tick
from portqueue.validation import cron_spec
from tests.hostile.support import HOSTILE
from tests.support.refusals import Unchanged, assert_refused, refusal
from tests.support.rows import db_now, schedule_row
from tests.support.services import run_once

Db = psycopg.Connection[Any]
UTC = timezone.utc
YEAR = timedelta(days=366)
# A chained walk stops here: "* * * * * *" has 31 million ticks a year. The
# probes below reach the rest of the year.
CHAINED_TICKS = 200
PROBES = 24

ZONES = ["UTC", "America/New_York", "Europe/London", "Europe/Paris", "Australia/Lord_Howe",
         "Pacific/Chatham", "America/Santiago", "Africa/Casablanca", "Asia/Kolkata",
         "America/St_Johns", "Antarctica/Troll"]

MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
DAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]
DRAWN = ["R", "r", "H", "h", "R(0-5)", "H(1-9)", "R/15", "H/10", "R(1-20)/5"]
MALFORMED = ["", "-1", "60", "99", "a", "*/0", "1-", "-", ",", "1,,2", "0x1", "1.5", "**",
             "L", "W", "#", "?", "1#", "5-1", "\u0661", "1\x00"]


def field(low: int, high: int, extras: list[str], hostile: bool) -> st.SearchStrategy[str]:
    """One cron field: lists of numbers, ranges and steps and the field's own
    letters; a hostile field also draws numbers one past either end, drawn
    fields and malformed ones."""
    number = st.integers(low, high)
    atoms = [
        st.just("*"),
        number.map(str),
        st.tuples(number, number).map(lambda ab: f"{min(ab)}-{max(ab)}"),
        st.tuples(st.sampled_from(["*", str(low)]), st.integers(1, high - low + 2)).map(
            lambda base_step: f"{base_step[0]}/{base_step[1]}"),
        st.tuples(number, number, st.integers(1, 10)).map(
            lambda abs_: f"{min(abs_[:2])}-{max(abs_[:2])}/{abs_[2]}"),
        st.sampled_from(extras or ["*"]),
    ]
    listed = st.lists(st.one_of(atoms), min_size=1, max_size=3).map(",".join)
    if not hostile:
        return listed
    near = st.sampled_from([str(low - 1), str(high + 1)])
    return st.one_of(listed, near, st.sampled_from(DRAWN + MALFORMED))


def cron_fields(hostile: bool) -> st.SearchStrategy[str]:
    minute = field(0, 59, [], hostile)
    hour = field(0, 23, [], hostile)
    day = field(1, 31, ["L", "15W", "1W", "?", "31", "29", "30"], hostile)
    month = field(1, 12, [*MONTHS, "MAR", "feb-apr"], hostile)
    weekday = field(0, 7, [*DAYS, "THU", "mon-fri", "thu#2", "sun#5", "L5", "L0", "?"],
                    hostile)
    second = field(0, 59, [], hostile)
    year = st.one_of(
        st.integers(2024, 2032).map(str),
        st.tuples(st.integers(2024, 2032), st.integers(2024, 2040)).map(
            lambda ab: f"{min(ab)}-{max(ab)}"),
        st.sampled_from(["*", "2099", "2027,2090", "2026-2099/7", "*/3"]),
        st.sampled_from(["1970", "2100", "1969", *DRAWN]) if hostile else st.just("*"),
    )
    return st.one_of(
        st.tuples(minute, hour, day, month, weekday),
        st.tuples(minute, hour, day, month, weekday, second),
        st.tuples(minute, hour, day, month, weekday, second, year),
    ).map(" ".join)


clean, hostile = cron_fields(hostile=False), cron_fields(hostile=True)
aliases = st.sampled_from(["@hourly", "@daily", "@midnight", "@weekly", "@monthly", "@yearly",
                           "@annually", "@DAILY", "@reboot", "@every 5m", "@"])
patterns = st.one_of(clean, clean, hostile, aliases,
                     clean.map(lambda p: f"  {p}\t"), clean.map(lambda p: p.upper()))
zones = st.sampled_from(ZONES)
# How far from now the year's walk starts: now itself, or up to two years on.
offsets = st.one_of(st.just(timedelta(0)),
                    st.integers(0, 2 * 366 * 86_400).map(lambda s: timedelta(seconds=s)))


def tick_after(pattern: str, tz: str, now: datetime) -> datetime | None:
    """The scheduler's next tick for a cron schedule found at ``now``."""
    return next_tick(cron=pattern, tz=tz, every_seconds=None, tick=now, now=now)


def transitions(tz: str, start: datetime, end: datetime) -> list[datetime]:
    """The instants in [start, end) where ``tz`` changes its UTC offset, to the hour."""
    zone, found = ZoneInfo(tz), []
    instant = start.replace(minute=0, second=0, microsecond=0)
    offset = instant.astimezone(zone).utcoffset()
    while instant < end:
        instant += timedelta(hours=1)
        if (current := instant.astimezone(zone).utcoffset()) != offset:
            found.append(instant)
            offset = current
    return found


def walk(pattern: str, tz: str, start: datetime) -> tuple[list[datetime], list[Any]]:
    """The chained ticks from ``start`` (each from the one before, as the
    scheduler walks them) for up to a year, and the next tick after each
    probe: a year's worth of instants, every DST transition of ``tz`` and a
    few seconds either side of it."""
    chained: list[datetime] = []
    now = start
    while len(chained) < CHAINED_TICKS:
        tick = tick_after(pattern, tz, now)
        if tick is None or tick > start + YEAR:
            break
        assert tick > now, f"{pattern!r} in {tz}: tick {tick} is not after {now}"
        assert tick.utcoffset() == timedelta(0)
        chained.append(tick)
        now = tick
    probes = [start + YEAR * k / PROBES for k in range(PROBES)]
    for change in transitions(tz, start, start + YEAR):
        probes += [change + timedelta(seconds=s) for s in (-1, 1799)]
    found = []
    for probe in probes:
        tick = tick_after(pattern, tz, probe)
        assert tick is None or tick > probe, f"{pattern!r} in {tz}: {tick} not after {probe}"
        later = None if tick is None else tick_after(pattern, tz, tick)
        assert later is None or tick is None or later > tick
        found.append((probe, tick, later))
    return chained, found


def check_walk(pattern: str, tz: str, start: datetime) -> list[datetime]:
    first = walk(pattern, tz, start)
    assert walk(pattern, tz, start) == first, f"{pattern!r} in {tz}: ticks differ between runs"
    chained, probed = first
    # A probe inside the chained stretch lands on the chained tick after it:
    # the next tick does not depend on how the scheduler got there.
    if chained:
        for probe, tick, _ in probed:
            if start <= probe < chained[-1]:
                assert tick == next(t for t in chained if t > probe), (pattern, tz, probe)
    return chained


@HOSTILE
@given(pattern=patterns, tz=zones, offset=offsets)
@example(pattern="R R * * *", tz="UTC", offset=timedelta(0))
@example(pattern="0 0 1 1 * 0 2027,2090", tz="UTC", offset=timedelta(0))
@example(pattern="30 1 * * *", tz="America/New_York", offset=timedelta(0))
@example(pattern="*/30 2 * * *", tz="Australia/Lord_Howe", offset=timedelta(0))
@example(pattern="* * * * * *", tz="Europe/London", offset=timedelta(0))
def test_every_accepted_cron_has_a_stable_increasing_year_of_ticks(
    pattern: str, tz: str, offset: timedelta
) -> None:
    error = refusal(lambda: cron_spec({"pattern": pattern, "tz": tz}))
    if error is not None:
        assert_refused(error, "schedule.cron.pattern")
        return
    start = datetime.now(UTC).replace(microsecond=0) + offset
    chained = check_walk(pattern, tz, start)
    if offset == timedelta(0):
        # Accepted means it fires: from now, it has a first tick.
        assert chained or tick_after(pattern, tz, start) is not None, pattern


# --- against the database: the add's first tick and the scheduler's next ---


def ticks_between(pattern: str, tz: str, low: datetime, high: datetime) -> list[datetime]:
    """The ticks the next tick may be for a ``now`` anywhere in [low, high]."""
    out: list[datetime] = []
    now = low
    while (tick := tick_after(pattern, tz, now)) is not None:
        out.append(tick)
        if tick > high or len(out) > 10_000:
            break
        now = tick
    return out


def spawned(db: Db, schema: str, schedule_id: str) -> list[tuple[Any, ...]]:
    return db.execute(
        sql.SQL("SELECT scheduled_for FROM {} WHERE schedule_id = %s").format(
            sql.Identifier(schema, "job")), [schedule_id]).fetchall()


def add(pq: PortQueue, pattern: str, tz: str) -> Callable[[], Any]:
    return lambda: pq.add_job(queue="crons", data={},
                              schedule={"cron": {"pattern": pattern, "tz": tz}})


@HOSTILE
@given(pattern=patterns, tz=zones)
@example(pattern="R R * * *", tz="UTC")
@example(pattern="0 0 1 1 * 0 2020", tz="UTC")
@example(pattern="* * * * * * 2027-2030", tz="Pacific/Chatham")
def test_an_accepted_cron_is_stored_and_spawned_on_its_ticks(
    pq: PortQueue, db: Db, pg_dsn: str, schema: str, pattern: str, tz: str
) -> None:
    before = Unchanged(db, schema)
    low = db_now(db)
    result: list[Any] = []
    error = refusal(lambda: result.append(add(pq, pattern, tz)()))
    if error is not None:
        assert_refused(error, "schedule.cron.pattern")
        before.assert_unchanged()
        return
    high = db_now(db)
    (added,) = result
    assert added.next_run_at in ticks_between(pattern, tz, low, high)
    # Due now (as after an outage): one pass spawns that tick, then moves
    # the schedule to a tick of the same walk after the pass's clock.
    db.execute(sql.SQL("UPDATE {} SET next_run_at = now() - interval '1 second' WHERE id = %s"
                       ).format(sql.Identifier(schema, "schedule")), [added.schedule_id])
    due = schedule_row(db, schema, added.schedule_id)["next_run_at"]
    low = db_now(db)
    assert int(run_once(Scheduler, pg_dsn, schema)[1]) >= 1
    high = db_now(db)
    assert spawned(db, schema, added.schedule_id) == [(due,)]
    row = schedule_row(db, schema, added.schedule_id)
    following = ticks_between(pattern, tz, low, high)
    if row["enabled"]:
        assert row["next_run_at"] in following and row["next_run_at"] > low
    else:  # the year field ran out between the add and the pass
        assert tick_after(pattern, tz, high) is None and row["next_run_at"] == due
    assert pq.remove_schedule(schedule_id=added.schedule_id)
