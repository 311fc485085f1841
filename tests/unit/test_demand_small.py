"""A claim is small (and worth a moment's wait) only while every queue with a
free slot is backlogged and has under half its slots free."""

from __future__ import annotations

from portqueue.worker.demand import Demand


def _full(concurrency: int, running: int) -> Demand:
    demand = Demand({"q": concurrency})
    asked = demand.take()
    for _ in range(asked["q"]):
        demand.started("q")
    demand.claimed(asked, {"q": asked["q"]})  # full: backlogged
    for _ in range(concurrency - running):
        demand.finished("q")
    return demand


def test_a_backlogged_queue_with_few_slots_free_is_small() -> None:
    assert _full(10, running=9).small()
    assert _full(10, running=6).small()


def test_half_its_slots_free_or_no_backlog_is_not_small() -> None:
    assert not _full(10, running=5).small()
    assert not _full(1, running=0).small(), "a queue of one slot never waits"
    demand = Demand({"q": 10})
    asked = demand.take()
    demand.started("q")
    demand.claimed(asked, {"q": 1})  # not full: nothing waits in the database
    demand.want("q")
    assert not demand.small()
