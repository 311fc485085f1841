"""The delay before a retry: delay * (1 | n | factor^(n-1)), capped, optionally jittered."""

from __future__ import annotations

import random

from portqueue.types import BackoffStrategy, RetryPolicy

# An uncapped exponential curve reaches float infinity, and Postgres rejects
# intervals past a few million years; no retry is meant to wait a decade.
MAX_DELAY_SECONDS = 10 * 365 * 24 * 3600.0


def retry_delay(policy: RetryPolicy, attempt: int, rng: random.Random | None = None) -> float:
    """Seconds to wait before attempt ``attempt + 1``, after attempt ``attempt`` failed."""
    backoff = policy.backoff
    if backoff.strategy is BackoffStrategy.FIXED:
        multiplier = 1.0
    elif backoff.strategy is BackoffStrategy.LINEAR:
        multiplier = float(attempt)
    else:
        try:
            multiplier = backoff.factor ** (attempt - 1)
        except OverflowError:
            multiplier = float("inf")
    delay = min(policy.delay_seconds * multiplier, MAX_DELAY_SECONDS)
    if backoff.max_delay_seconds is not None:
        delay = min(delay, float(backoff.max_delay_seconds))
    if backoff.jitter:
        delay *= (rng or random).uniform(0.5, 1.0)
    return delay
