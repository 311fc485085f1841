"""The queue list shows each queue's flow-control limits (SPEC §8)."""

from __future__ import annotations

import httpx

from portqueue import AsyncPortQueue, RateLimit


async def test_the_queue_list_shows_the_limits(
    dashboard: httpx.AsyncClient, apq: AsyncPortQueue,
) -> None:
    await apq.set_queue_limits(queue="limited", global_concurrency=20, partition_concurrency=1,
                               rate_limit=RateLimit(100, 60, per_partition=True))
    await apq.add_job(queue="plain", data=1)
    page = await dashboard.get("/")
    assert page.status_code == 200
    assert '<td class="limits">global 20, per key 1, 100/60s per key</td>' in page.text
    assert '<td class="limits">-</td>' in page.text
