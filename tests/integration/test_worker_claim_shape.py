"""The worker's claim shape (worker/fetcher.py): claim_plain while no pending
job names a pattern or has a partition key; when claim_plain finds one it
claims nothing, and the worker claims with claim at once, not at its next
poll (30 s here), and keeps to claim for a while. Statements are recorded by
wrapping the fetcher's fetch_async; nothing is timed."""

from __future__ import annotations

from typing import Any

import pytest

from portqueue import PortQueue
from portqueue.driver import fetch_async
from portqueue.queries import Query
from portqueue.worker import fetcher
from tests.support.waiting import wait_until
from tests.support.workers import SyncHarness

SLOW_POLL = 30.0


def test_the_worker_claims_with_claim_at_once_when_claim_plain_finds_a_pattern(
        harness: SyncHarness, pq: PortQueue, monkeypatch: pytest.MonkeyPatch) -> None:
    statements: list[str] = []
    fetch = fetch_async

    async def recorded(conn: Any, query: Query, row_factory: Any) -> Any:
        statements.append(query.name)
        return await fetch(conn, query, row_factory)

    monkeypatch.setattr(fetcher, "fetch_async", recorded)
    done: list[Any] = []
    pq.create_queue(queue="mixed", handler=lambda job: done.append(job.data))
    harness.start(poll_interval=SLOW_POLL)
    pq.add_job(queue="mixed", data="plain-1")
    wait_until(lambda: done == ["plain-1"], what="the first plain job")
    # A job for this worker's key: claim_plain says 'mixed', claim takes it.
    pq.add_job(queue="mixed", data="patterned", preferred_instance_key_pattern="^test-host")
    wait_until(lambda: "patterned" in done, what="the patterned job, before the poll")
    assert statements[:1] == ["claim_plain"]
    assert "claim" in statements
    # From then on claim, for FULL_CLAIM_SECONDS: a plain job the same.
    pq.add_job(queue="mixed", data="plain-2")
    wait_until(lambda: "plain-2" in done, what="the second plain job")
    assert statements[-1] == "claim"

