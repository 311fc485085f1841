"""The scheduler's next-tick arithmetic, without a database: interval grids,
misfires, cron in an IANA zone, and both DST transitions as croniter defines them."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from portqueue.maintenance.scheduler import next_tick

UTC = timezone.utc


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def every(seconds: int, tick: datetime, now: datetime) -> datetime:
    return next_tick(cron=None, tz="UTC", every_seconds=seconds, tick=tick, now=now)


def cron(pattern: str, tz: str, now: datetime) -> datetime:
    # For cron the current tick plays no part: the next match after now.
    return next_tick(cron=pattern, tz=tz, every_seconds=None, tick=now, now=now)


def test_interval_on_time_moves_one_period() -> None:
    tick = at("2026-01-01T00:00:00+00:00")
    assert every(30, tick, tick) == tick + timedelta(seconds=30)
    assert every(30, tick, tick + timedelta(milliseconds=250)) == tick + timedelta(seconds=30)


def test_interval_late_pass_keeps_the_grid() -> None:
    # A pass 0.9 s late must not push later ticks 0.9 s later (drift).
    tick = at("2026-01-01T00:00:00+00:00")
    assert every(1, tick, tick + timedelta(seconds=0.9)) == tick + timedelta(seconds=1)
    assert every(1, tick, tick + timedelta(seconds=1)) == tick + timedelta(seconds=2)


def test_interval_misfire_skips_to_the_first_tick_after_now() -> None:
    # A ten-minute outage on a per-minute schedule: one jump, not ten periods.
    tick = at("2026-01-01T00:00:00+00:00")
    now = tick + timedelta(minutes=10, seconds=5)
    assert every(60, tick, now) == tick + timedelta(minutes=11)


def test_interval_result_is_utc() -> None:
    tick = at("2026-01-01T01:00:00+01:00")
    result = every(60, tick, tick)
    assert result.utcoffset() == timedelta(0)
    assert result == at("2026-01-01T00:01:00+00:00")


def test_interval_not_yet_due_keeps_its_tick() -> None:
    tick = at("2026-01-01T00:00:00+00:00")
    assert every(60, tick, tick - timedelta(seconds=1)) == tick


def test_cron_in_a_non_utc_zone() -> None:
    # 08:00 on weekdays in New York is 13:00 UTC in winter, 12:00 UTC in summer.
    assert cron("0 8 * * 1-5", "America/New_York", at("2026-01-05T12:00:00+00:00")) == at(
        "2026-01-05T13:00:00+00:00")
    assert cron("0 8 * * 1-5", "America/New_York", at("2026-07-06T11:00:00+00:00")) == at(
        "2026-07-06T12:00:00+00:00")
    # Friday 13:00 UTC passed: next is Monday.
    assert cron("0 8 * * 1-5", "America/New_York", at("2026-01-09T13:00:00+00:00")) == at(
        "2026-01-12T13:00:00+00:00")
    assert cron("0 9 * * *", "Asia/Kolkata", at("2026-01-01T00:00:00+00:00")) == at(
        "2026-01-01T03:30:00+00:00")


def test_cron_next_is_strictly_after_now() -> None:
    now = at("2026-01-05T13:00:00+00:00")  # exactly 08:00 in New York
    assert cron("0 8 * * *", "America/New_York", now) == at("2026-01-06T13:00:00+00:00")


def ticks(pattern: str, tz: str, start: datetime, count: int) -> list[datetime]:
    """Successive ticks as the scheduler walks them: each from the previous one."""
    out, now = [], start
    for _ in range(count):
        now = cron(pattern, tz, now)
        out.append(now)
    return out


def test_daily_0230_new_york_across_spring_forward() -> None:
    # 2026-03-08: clocks jump 02:00 EST -> 03:00 EDT, so 02:30 does not exist.
    # croniter fires at 03:00 EDT that day (07:00 UTC), then 02:30 EDT again.
    assert ticks("30 2 * * *", "America/New_York", at("2026-03-06T12:00:00+00:00"), 4) == [
        at("2026-03-07T07:30:00+00:00"),  # 02:30 EST
        at("2026-03-08T07:00:00+00:00"),  # the missing 02:30: 03:00 EDT
        at("2026-03-09T06:30:00+00:00"),  # 02:30 EDT
        at("2026-03-10T06:30:00+00:00"),
    ]


def test_daily_0230_new_york_across_fall_back() -> None:
    # 2026-11-01: clocks go 02:00 EDT -> 01:00 EST; 02:30 happens once (EST).
    assert ticks("30 2 * * *", "America/New_York", at("2026-10-30T12:00:00+00:00"), 4) == [
        at("2026-10-31T06:30:00+00:00"),  # 02:30 EDT
        at("2026-11-01T07:30:00+00:00"),  # 02:30 EST, once
        at("2026-11-02T07:30:00+00:00"),
        at("2026-11-03T07:30:00+00:00"),
    ]


def test_repeated_hour_fires_twice_as_croniter_defines() -> None:
    # 01:30 exists twice on the fall-back night; croniter yields both, and as
    # distinct UTC instants they are distinct ticks (two jobs).
    assert ticks("30 1 * * *", "America/New_York", at("2026-11-01T04:00:00+00:00"), 3) == [
        at("2026-11-01T05:30:00+00:00"),  # 01:30 EDT
        at("2026-11-01T06:30:00+00:00"),  # 01:30 EST
        at("2026-11-02T06:30:00+00:00"),
    ]


@pytest.mark.parametrize("now", [
    at("2026-03-08T06:59:59+00:00"), at("2026-03-08T07:00:00+00:00"),
    at("2026-11-01T05:59:59+00:00"), at("2026-11-01T06:00:00+00:00"),
])
def test_next_tick_is_always_after_now_and_utc(now: datetime) -> None:
    for pattern in ("30 2 * * *", "*/15 * * * *", "0 * * * *"):
        result = cron(pattern, "America/New_York", now)
        assert result > now
        assert result.tzinfo is not None and result.utcoffset() == timedelta(0)
        assert result.astimezone(UTC) == result
