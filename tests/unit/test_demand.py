"""The fetcher's per-queue wake-up state (portqueue/worker/demand.py): which
queues a claim asks for, and when a freed slot or a NOTIFY makes one due."""

from __future__ import annotations

from portqueue.worker.demand import Demand


def claim(demand: Demand, returned: dict[str, int]) -> dict[str, int]:
    """Take what is due, pretend the claim returned ``returned`` rows per queue."""
    asked = demand.take()
    for queue, rows in returned.items():
        for _ in range(rows):
            demand.started(queue)
    demand.claimed(asked, returned)
    return asked


def test_every_queue_is_claimed_first() -> None:
    demand = Demand({"a": 2, "b": 3})
    assert demand.ready()
    assert claim(demand, {}) == {"a": 2, "b": 3}
    assert not demand.ready()


def test_a_full_queue_stays_backlogged_when_another_claim_comes_back_short() -> None:
    demand = Demand({"busy": 2, "idle": 3})
    claim(demand, {"busy": 2})
    demand.want("idle")
    assert claim(demand, {}) == {"idle": 3}
    demand.changed.clear()
    demand.finished("busy")
    assert demand.changed.is_set() and demand.ready()
    assert demand.take() == {"busy": 1}


def test_a_freed_slot_of_a_queue_whose_claim_came_back_short_waits() -> None:
    demand = Demand({"q": 3})
    claim(demand, {"q": 1})
    demand.changed.clear()
    demand.finished("q")
    assert not demand.changed.is_set() and not demand.ready()


def test_a_notify_makes_only_its_queue_due_and_only_with_a_free_slot() -> None:
    demand = Demand({"a": 1, "b": 1})
    claim(demand, {"a": 1})  # a full, b empty
    demand.changed.clear()
    demand.want("a")
    assert not demand.changed.is_set() and not demand.ready(), "a has no free slot"
    demand.want("b")
    assert demand.changed.is_set()
    assert demand.take() == {"b": 1}
    demand.want("unknown")
    assert not demand.ready()


def test_a_notify_for_a_full_queue_claims_it_when_a_slot_frees() -> None:
    demand = Demand({"a": 1})
    claim(demand, {"a": 0})
    demand.started("a")  # pretend the slot is held by something claimed earlier
    demand.want("a")
    assert not demand.ready()
    demand.finished("a")
    assert demand.take() == {"a": 1}


def test_expired_rows_leave_a_full_queue_due_at_once() -> None:
    demand = Demand({"a": 2})
    asked = demand.take()
    demand.started("a")  # one row ran; the other was expired, and runs nothing
    demand.claimed(asked, {"a": 2})
    assert demand.take() == {"a": 1}
