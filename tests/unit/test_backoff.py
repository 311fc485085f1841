"""The retry delay (SPEC §4.1): delay * (1 | n | factor^(n-1)), capped, optionally jittered."""

from __future__ import annotations

import random

import pytest

from portqueue.types import Backoff, BackoffStrategy, RetryPolicy
from portqueue.worker.backoff import MAX_DELAY_SECONDS, retry_delay


def policy(strategy: BackoffStrategy, *, delay: int = 2, factor: float = 2.0,
           cap: int | None = None, jitter: bool = False) -> RetryPolicy:
    return RetryPolicy(max_attempts=1_000_000, delay_seconds=delay,
                       backoff=Backoff(strategy=strategy, factor=factor,
                                       max_delay_seconds=cap, jitter=jitter))


@pytest.mark.parametrize("attempt", [1, 2, 7, 1000])
def test_fixed_waits_the_same_after_every_attempt(attempt: int) -> None:
    assert retry_delay(policy(BackoffStrategy.FIXED, delay=5), attempt) == 5


def test_linear_grows_with_the_attempt_that_failed() -> None:
    delays = [retry_delay(policy(BackoffStrategy.LINEAR, delay=3), n) for n in range(1, 5)]
    assert delays == [3, 6, 9, 12]


def test_exponential_multiplies_by_the_factor_from_the_second_attempt() -> None:
    p = policy(BackoffStrategy.EXPONENTIAL, delay=2, factor=3)
    assert [retry_delay(p, n) for n in range(1, 5)] == [2, 6, 18, 54]


def test_a_zero_delay_retries_at_once_whatever_the_strategy() -> None:
    for strategy in BackoffStrategy:
        assert retry_delay(policy(strategy, delay=0), 10) == 0


@pytest.mark.parametrize("strategy", list(BackoffStrategy))
def test_max_delay_caps_every_strategy(strategy: BackoffStrategy) -> None:
    assert retry_delay(policy(strategy, delay=7, factor=10, cap=20), 1) == 7  # under the cap
    p = policy(strategy, delay=30, factor=10, cap=20)
    assert retry_delay(p, 1) == 20
    assert retry_delay(p, 50) == 20


def test_jitter_scales_the_delay_into_half_to_whole() -> None:
    p = policy(BackoffStrategy.EXPONENTIAL, delay=10, factor=2, jitter=True)
    rng = random.Random(1234)
    samples = [retry_delay(p, 3, rng) for _ in range(2000)]  # 40 s before jitter
    assert all(20 <= s <= 40 for s in samples)
    # Spread over the range, not stuck at one end.
    assert min(samples) < 21 and max(samples) > 39
    # A seeded generator makes it reproducible.
    again = random.Random(1234)
    assert samples == [retry_delay(p, 3, again) for _ in range(2000)]


def test_jitter_applies_after_the_cap() -> None:
    p = policy(BackoffStrategy.LINEAR, delay=100, cap=60, jitter=True)
    rng = random.Random(7)
    assert all(30 <= retry_delay(p, 9, rng) <= 60 for _ in range(500))


@pytest.mark.parametrize("factor", [2.0, 1000.0])
def test_a_huge_attempt_does_not_overflow(factor: float) -> None:
    p = policy(BackoffStrategy.EXPONENTIAL, delay=1, factor=factor)
    assert retry_delay(p, 1_000_000) == MAX_DELAY_SECONDS
    capped = policy(BackoffStrategy.EXPONENTIAL, delay=1, factor=factor, cap=300, jitter=True)
    assert 150 <= retry_delay(capped, 1_000_000, random.Random(0)) <= 300


def test_linear_with_a_huge_attempt_stays_within_the_ceiling() -> None:
    p = policy(BackoffStrategy.LINEAR, delay=86_400)
    assert retry_delay(p, 1_000_000) == MAX_DELAY_SECONDS
