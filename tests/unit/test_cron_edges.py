"""Cron patterns at their edges, without a database (issue 16 items 3 and 4):
a year field's last tick, a schedule with no tick left, and croniter's R/H
fields, which are drawn anew every time a pattern is read."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from portqueue import CronSpec, InvalidArgument, Schedule
from portqueue.maintenance.scheduler import next_tick
from portqueue.operations import next_run_at
from portqueue.validation import cron_spec

UTC = timezone.utc


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def cron(pattern: str, now: datetime, tz: str = "UTC") -> datetime | None:
    return next_tick(cron=pattern, tz=tz, every_seconds=None, tick=now, now=now)


# --- a year field (croniter's seventh: minute hour day month weekday second year) ---


def test_a_year_field_yields_its_last_tick_then_none() -> None:
    pattern = "0 12 31 12 * 0 2027"  # one tick: 2027-12-31 12:00:00 UTC
    assert cron(pattern, at("2027-06-01T00:00:00+00:00")) == at("2027-12-31T12:00:00+00:00")
    # Found at its last tick (or late), it has no following tick: None, not an error.
    assert cron(pattern, at("2027-12-31T12:00:00+00:00")) is None
    assert cron(pattern, at("2030-01-01T00:00:00+00:00")) is None


def test_a_year_field_reaches_a_year_far_ahead() -> None:
    # croniter gives up after 50 years by default; the year field runs to
    # 2099, so a tick 63 years on must read as a tick, not as the end.
    pattern = "0 0 1 1 * 0 2027,2090"
    assert cron(pattern, at("2027-01-01T00:00:00+00:00")) == at("2090-01-01T00:00:00+00:00")


def test_a_year_field_in_a_zone_ends_on_local_time() -> None:
    # 23:30 on 31 December 2027 in Paris is 22:30 UTC; nothing after it.
    pattern = "30 23 31 12 * 0 2027"
    assert cron(pattern, at("2027-12-31T00:00:00+00:00"), "Europe/Paris") == at(
        "2027-12-31T22:30:00+00:00")
    assert cron(pattern, at("2027-12-31T22:30:00+00:00"), "Europe/Paris") is None


@pytest.mark.parametrize("pattern", [
    "0 0 1 1 * 0 2020",  # a past year
    "0 0 1 1 * 0 1970-2025",
    "0 0 30 2 * 0 2030",  # a year with no such day
])
def test_a_cron_with_no_tick_after_now_is_refused(pattern: str) -> None:
    with pytest.raises(InvalidArgument) as raised:
        cron_spec(pattern)
    assert raised.value.argument == "schedule.cron.pattern"
    assert "never fires" in str(raised.value)


def test_the_add_refuses_a_last_tick_past_on_the_database_clock() -> None:
    # The validator asks the host's clock; the add computes the first tick on
    # the database's, before anything is written, and refuses it the same way.
    schedule = Schedule(cron=CronSpec("0 12 31 12 * 0 2027"))
    assert next_run_at(schedule, at("2027-12-31T11:59:59+00:00")) == at(
        "2027-12-31T12:00:00+00:00")
    with pytest.raises(InvalidArgument) as raised:
        next_run_at(schedule, at("2027-12-31T12:00:00+00:00"))
    assert raised.value.argument == "schedule.cron.pattern"


def test_a_year_field_with_a_future_tick_is_accepted() -> None:
    year = datetime.now(UTC).year + 1
    assert cron_spec(f"0 9 * * * 0 {year}").pattern == f"0 9 * * * 0 {year}"


# --- R and H: croniter draws them each time it reads the pattern ---


@pytest.mark.parametrize("pattern", [
    "R R * * *", "r r * * *", "0 R * * *", "R(0-29) 3 * * *", "R/15 * * * *",
    "0 0 R * *", "0 0 * R *", "0 0 * * R", "0 0 * * * R", "0 0 1 1 * 0 R",
    "H H * * *", "h * * * *", "H(0-29)/10 * * * *", "0 H * * *",
])
def test_a_drawn_field_is_refused_naming_the_pattern(pattern: str) -> None:
    with pytest.raises(InvalidArgument) as raised:
        cron_spec(pattern)
    assert raised.value.argument == "schedule.cron.pattern"
    assert "R and H" in str(raised.value)


@pytest.mark.parametrize("pattern", [
    "0 0 * mar thu", "0 0 * MAR THU", "0 0 * * thu#2", "0 0 * apr-oct sat,sun",
    "0 12 L * *", "0 12 * * L5", "0 12 15W * *", "0 0 ? * *", "@hourly", "@daily",
])
def test_names_and_other_letters_are_not_mistaken_for_draws(pattern: str) -> None:
    assert cron_spec(pattern).pattern == pattern


def test_a_stored_drawn_pattern_has_no_tick() -> None:
    # A row written before R/H were refused (or by SQL) must not be drawn
    # anew at every tick: the scheduler reads it as a pattern it cannot use.
    with pytest.raises(ValueError, match="R and H"):
        cron("R R * * *", at("2026-01-01T00:00:00+00:00"))
