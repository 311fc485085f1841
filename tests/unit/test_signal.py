"""The handler's stop signal: set once with a reason; waited on by threads and by asyncio."""

from __future__ import annotations

import asyncio
import threading
import time

from portqueue.worker.signal import AsyncSignal, SignalState, ThreadSignal


def test_starts_unset() -> None:
    state = SignalState()
    assert not state.is_set()
    assert state.reason is None
    assert not ThreadSignal(state).is_set() and ThreadSignal(state).reason is None
    assert not AsyncSignal(state).is_set() and AsyncSignal(state).reason is None


def test_is_set_once_and_keeps_the_first_reason() -> None:
    state = SignalState()
    assert state.set("cancelled") is True
    assert state.set("timeout") is False
    assert state.set("shutdown") is False
    assert state.is_set()
    assert state.reason == "cancelled"
    assert ThreadSignal(state).reason == "cancelled"
    assert AsyncSignal(state).reason == "cancelled"


def test_concurrent_setters_agree_on_one_winner() -> None:
    state = SignalState()
    results: list[bool] = []
    start = threading.Barrier(8)

    def setter(reason: str) -> None:
        start.wait()
        results.append(state.set(reason))  # type: ignore[arg-type]

    reasons = ["cancelled", "timeout", "lease_lost", "shutdown"] * 2
    threads = [threading.Thread(target=setter, args=(r,)) for r in reasons]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results.count(True) == 1
    assert state.reason in reasons


def test_thread_wait_times_out_while_unset() -> None:
    signal = ThreadSignal(SignalState())
    began = time.monotonic()
    assert signal.wait(0.05) is False
    assert time.monotonic() - began >= 0.04


def test_thread_wait_returns_when_another_thread_sets_it() -> None:
    state = SignalState()
    signal = ThreadSignal(state)
    timer = threading.Timer(0.05, state.set, args=("timeout",))
    timer.start()
    began = time.monotonic()
    try:
        assert signal.wait(5) is True
    finally:
        timer.cancel()
    assert time.monotonic() - began < 2
    assert signal.reason == "timeout"


def test_thread_wait_on_a_set_signal_returns_at_once() -> None:
    state = SignalState()
    state.set("shutdown")
    assert ThreadSignal(state).wait() is True


async def test_async_wait_returns_when_set_on_the_loop() -> None:
    state = SignalState()
    signal = AsyncSignal(state)
    asyncio.get_running_loop().call_later(0.02, state.set, "cancelled")
    await asyncio.wait_for(signal.wait(), 2)
    assert signal.is_set() and signal.reason == "cancelled"


async def test_awaiting_the_signal_itself_waits_for_it() -> None:
    state = SignalState()
    asyncio.get_running_loop().call_later(0.02, state.set, "lease_lost")
    await asyncio.wait_for(AsyncSignal(state), 2)  # type: ignore[arg-type]
    assert state.reason == "lease_lost"


async def test_async_wait_on_a_set_signal_returns_at_once() -> None:
    state = SignalState()
    state.set("timeout")
    await asyncio.wait_for(AsyncSignal(state).wait(), 0.5)


async def test_async_wait_blocks_while_unset() -> None:
    waiter = asyncio.ensure_future(AsyncSignal(SignalState()).wait())
    await asyncio.sleep(0.05)
    assert not waiter.done()
    waiter.cancel()


async def test_a_set_from_another_thread_wakes_every_async_waiter() -> None:
    state = SignalState()
    signal = AsyncSignal(state)
    waiters = [asyncio.ensure_future(signal.wait()) for _ in range(3)]
    await asyncio.sleep(0.01)  # every waiter is registered
    assert not any(w.done() for w in waiters)

    def set_later() -> None:
        time.sleep(0.02)
        state.set("cancelled")

    setter = threading.Thread(target=set_later)
    setter.start()
    await asyncio.wait_for(asyncio.gather(*waiters), 2)
    setter.join()
    assert state.reason == "cancelled"


async def test_a_cancelled_waiter_does_not_break_a_later_set() -> None:
    state = SignalState()
    signal = AsyncSignal(state)
    gone = asyncio.ensure_future(signal.wait())
    await asyncio.sleep(0.01)
    gone.cancel()
    staying = asyncio.ensure_future(signal.wait())
    await asyncio.sleep(0.01)
    assert state.set("shutdown") is True
    await asyncio.wait_for(staying, 1)
    assert gone.cancelled()
