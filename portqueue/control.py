"""Exceptions a handler raises to steer its job rather than fail it.

``raise Snooze(seconds=30)`` puts the job back to ``pending``, to start that
much later on the database clock, without spending its attempt or recording
an error. ``raise Cancel("reason")`` ends it ``cancelled`` at once, without a
retry; the reason is kept as the attempt's error entry (type
``portqueue.control.Cancel``) and the row's ``error``. Both are settled by the
worker's fenced writes, like a return or a failure: a run that lost its lease
changes nothing.

Caveat: they are ordinary exceptions, so a handler's own ``except Exception``
around the ``raise`` catches them first.
"""

from __future__ import annotations

import math

from portqueue.errors import InvalidArgument

# A snooze longer than this is almost surely a unit mistake (milliseconds).
MAX_SNOOZE_SECONDS = 365 * 24 * 3600


class Snooze(Exception):
    """Back to ``pending``, starting ``seconds`` from now (0 to a year); no attempt spent."""

    def __init__(self, seconds: float) -> None:
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not (
                math.isfinite(seconds) and 0 <= seconds <= MAX_SNOOZE_SECONDS):
            raise InvalidArgument("seconds", f"must be a number from 0 to {MAX_SNOOZE_SECONDS}, "
                                  f"got {seconds!r}")
        super().__init__(f"snoozed for {seconds} s")
        self.seconds = float(seconds)


class Cancel(Exception):
    """End the job ``cancelled`` now, with no retry; ``reason`` is kept as its error."""

    def __init__(self, reason: str = "cancelled by its handler") -> None:
        if not isinstance(reason, str):
            raise InvalidArgument("reason", f"must be text, got {type(reason).__name__}")
        super().__init__(reason)
        self.reason = reason
