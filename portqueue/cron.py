"""Cron arithmetic: the next match of a pattern in an IANA zone, as croniter defines it.

One function serves the validator (does the pattern ever fire?), the add (its
first tick) and the scheduler (every later tick), so the three cannot disagree.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

from croniter import CroniterBadDateError, croniter

# croniter's year field runs from 1970 to 2099, and by default it stops
# looking 50 years ahead: a year field such as "2027,2090" would read as
# ending in 2027. Searching the whole span finds every tick it can have.
YEARS_SEARCHED = 2099 - 1970 + 1

# croniter's R (random) and H (hashed) fields, alone or with a range or a
# step: "R", "h", "R(0-29)", "H/15", "H(0-29)/10". croniter draws R again
# each time it reads a pattern, and the scheduler reads it at every tick, so
# "R R * * *" fired at a new random time each day, several times some days;
# H needs a hash key croniter cannot have here. Month and weekday names
# ("mar", "thu") never match: a drawn field is a whole field.
DRAWN_FIELD = re.compile(r"[rh](\(\d+-\d+\))?(/\d+)?", re.IGNORECASE)

DRAWN_REFUSAL = ("has an R or H field; R and H are not supported, as croniter draws them "
                 "anew each time it reads the pattern: write the minute and hour out")


def drawn_field(pattern: str) -> str | None:
    """The pattern's first R or H field, or None."""
    return next((f for f in pattern.split() if DRAWN_FIELD.fullmatch(f)), None)


def next_match(pattern: str, tz: str, after: datetime) -> datetime | None:
    """The pattern's first match strictly after ``after``, in UTC; None when it
    has none (its year field is over, or it names a day that does not exist).

    Raises ``ValueError`` for a pattern with an R or H field, and what
    croniter or ``ZoneInfo`` raise for a pattern or zone they cannot read."""
    if drawn_field(pattern) is not None:
        raise ValueError(f"cron pattern {pattern!r} {DRAWN_REFUSAL}")
    start = after.astimezone(ZoneInfo(tz))
    try:
        tick: datetime = croniter(pattern, start, max_years_between_matches=YEARS_SEARCHED
                                  ).get_next(datetime)
    except CroniterBadDateError:
        return None
    return tick.astimezone(timezone.utc)
