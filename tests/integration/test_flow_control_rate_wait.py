"""A rate-limited worker waits for its window instead of polling (SPEC §8): with
the poll interval at 30 s, jobs held back by the rate still start as the window
allows, and the claims made meanwhile are a handful, not a busy loop."""

from __future__ import annotations

from typing import Any

import pytest

from portqueue import PortQueue, RateLimit
from portqueue.worker.limits import Limits
from tests.support.waiting import wait_until
from tests.support.workers import SyncHarness

SLOW_POLL = 30.0


def test_a_rate_limited_worker_sleeps_until_the_next_start_is_allowed(
    client: PortQueue, harness: SyncHarness, monkeypatch: pytest.MonkeyPatch,
) -> None:
    claims: list[int] = []
    claim = Limits.claim

    async def counted(self: Limits, *args: Any, **kwargs: Any) -> Any:
        claims.append(1)
        return await claim(self, *args, **kwargs)

    monkeypatch.setattr(Limits, "claim", counted)
    done: list[int] = []
    client.create_queue(queue="rated", handler=lambda job: done.append(job.data),
                        concurrency=10, rate_limit=RateLimit(limit=2, period_seconds=1))
    client.add_jobs(queue="rated", jobs=[{"data": n} for n in range(6)])
    harness.start(poll_interval=SLOW_POLL)
    # Three windows of two starts each, long before the 30 s poll.
    wait_until(lambda: len(done) == 6, 10, "six jobs at two a second")
    # One claim per window that starts jobs, plus the wake-ups a completion's
    # NOTIFY causes (a job finishing frees no rate): a few per window.
    assert len(claims) <= 20, f"{len(claims)} claims for three windows"
    starts = sorted(job.started_at for job in client.get_jobs(queue="rated").items
                    if job.started_at is not None)
    assert (starts[-1] - starts[0]).total_seconds() >= 2
