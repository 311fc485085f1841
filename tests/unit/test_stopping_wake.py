"""The worker's waits (portqueue/worker/stopping.py): ``Stopping.wait_for`` on a
``Wake`` ends on the wake, on stop, or at its deadline, resumes its waiter
at the next trip through the loop (an idle worker's NOTIFY-to-claim path),
and a cancellation reaches the waiter as it is."""

from __future__ import annotations

import asyncio

import pytest

from portqueue.worker.stopping import Stopping, Wake


async def waiting(stopping: Stopping, wake: Wake | None, timeout: float | None,
                  ended: list[str]) -> None:
    await stopping.wait_for(wake, timeout)
    ended.append("ended")


def test_a_wake_resumes_its_waiter_at_the_next_trip_through_the_loop() -> None:
    async def main() -> None:
        stopping, wake = Stopping(), Wake()
        ended: list[str] = []
        task = asyncio.create_task(waiting(stopping, wake, 60, ended))
        await asyncio.sleep(0)
        assert not ended
        wake.set()
        await asyncio.sleep(0)
        assert ended == ["ended"]
        await task

    asyncio.run(main())


def test_stop_ends_the_wait_and_so_does_its_deadline() -> None:
    async def main() -> None:
        stopping, wake = Stopping(), Wake()
        ended: list[str] = []
        task = asyncio.create_task(waiting(stopping, wake, 60, ended))
        await asyncio.sleep(0)
        stopping.set()
        await asyncio.wait_for(task, 5)
        assert ended == ["ended"]
        stopping, ended = Stopping(), list[str]()
        await asyncio.wait_for(waiting(stopping, Wake(), 0.01, ended), 5)
        await asyncio.wait_for(waiting(stopping, None, 0.01, ended), 5)
        assert ended == ["ended", "ended"]

    asyncio.run(main())


def test_a_set_wake_or_stop_returns_at_once_and_clear_rearms() -> None:
    async def main() -> None:
        stopping, wake = Stopping(), Wake()
        ended: list[str] = []
        wake.set()
        await waiting(stopping, wake, None, ended)
        wake.clear()
        assert not wake.is_set()
        stopping.set()
        await waiting(stopping, wake, None, ended)
        assert ended == ["ended", "ended"]

    asyncio.run(main())


def test_a_cancelled_wait_raises_and_leaves_no_waiter() -> None:
    async def main() -> None:
        stopping, wake = Stopping(), Wake()
        ended: list[str] = []
        task = asyncio.create_task(waiting(stopping, wake, None, ended))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert ended == []
        # The next wait is woken alone, by the next set.
        second = asyncio.create_task(waiting(stopping, wake, 60, ended))
        await asyncio.sleep(0)
        wake.set()
        await asyncio.wait_for(second, 5)
        assert ended == ["ended"]

    asyncio.run(main())
