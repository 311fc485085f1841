"""SPEC §10 with §8: ``drain`` runs the jobs of a queue with flow-control
limits too (it claims a limited queue with the limited claim, as a worker
does), and the limit holds while it does."""

from __future__ import annotations

import threading
from typing import Any

from portqueue import PortQueue


def test_drain_runs_a_globally_limited_queue_within_its_limit(client: PortQueue) -> None:
    running = 0
    most = 0
    lock = threading.Lock()

    def handler(job: Any) -> None:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        with lock:
            running -= 1

    client.create_queue(queue="drain-limited", handler=handler, concurrency=5,
                        global_concurrency=2)
    for n in range(6):
        client.add_job(queue="drain-limited", data={"n": n})

    result = client.drain(queues=["drain-limited"])

    assert result.completed == 6, result
    assert most <= 2, "never more than global_concurrency at once"
