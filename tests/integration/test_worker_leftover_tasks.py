"""A sync worker's loop ends with no task pending on it: the runner of a sync
handler that outlived the grace period (its job released, its thread still
running) used to stay pending on the closed loop, and Python later logged
"Task was destroyed but it is pending!" wherever the collector found it (seen
in drain and worker test runs)."""

from __future__ import annotations

import asyncio
from typing import Any

from portqueue import PortQueue
from tests.support.waiting import wait_until
from tests.support.workers import SyncHarness


def test_no_task_is_left_pending_on_a_stopped_sync_worker_loop(
    harness: SyncHarness, pq: PortQueue
) -> None:
    gate = harness.gate()
    running: list[str] = []

    @pq.handler("slow")
    def handler(job: Any) -> None:
        running.append(job.id)
        gate.wait(20)  # ignores its signal: it outlives the grace period

    harness.start(grace_seconds=0.2)
    pq.add_job(queue="slow", data={})
    wait_until(lambda: running, what="the handler to start")
    host = pq._host
    assert host is not None
    pq.stop()
    pending = [task.get_name() for task in asyncio.all_tasks(host.loop) if not task.done()]
    gate.set()
    assert host.loop.is_closed()
    assert pending == []
