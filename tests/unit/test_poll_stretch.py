"""A worker that hears no wake-ups polls more rarely as its queue's workers
grow, so the queue's pollers together poll about WAKE_SHARE times a poll
interval, up to POLL_STRETCH_MAX; the busiest of its queues decides."""

from __future__ import annotations

from portqueue.worker.listener import POLL_STRETCH_MAX, WAKE_SHARE, poll_stretch


def test_few_workers_poll_every_interval() -> None:
    assert poll_stretch({}) == 1.0
    assert poll_stretch({"q": WAKE_SHARE + 1}) == 1.0
    assert poll_stretch({"q": 2 * WAKE_SHARE}) == 1.0


def test_many_workers_stretch_their_polls_up_to_the_cap() -> None:
    assert poll_stretch({"q": 3 * WAKE_SHARE}) == 2.0
    assert poll_stretch({"q": 1000}) == POLL_STRETCH_MAX


def test_the_queue_with_fewest_workers_decides() -> None:
    assert poll_stretch({"busy": 1000, "few": 3 * WAKE_SHARE}) == 2.0
