"""The worker's stop request, as an event every loop waits on.

Every wait in the worker is "what I wait for, a deadline, or stop, whichever
comes first", so a loop ends because it saw the stop, not because a
cancellation reached it: on Python 3.10 and 3.11 a cancellation can be lost
(``asyncio.wait_for`` swallows one that arrives as its inner wait finishes),
and a loop relying on it alone would then sleep its whole interval.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


class Wake:
    """What ``asyncio.Event`` gives a loop (set, clear, is_set, wait), with
    waiters that are plain futures, so that ``Stopping.wait_for`` waits on
    "this, stop, or a deadline" with one future and no task (two tasks and
    ``asyncio.wait`` took three trips through the loop; docs/performance.md,
    "latency (session 2026-12-03)"). Every wait of the worker's loops that
    stop must end is on one."""

    def __init__(self) -> None:
        self._set = False
        self._waiters: set[asyncio.Future[None]] = set()

    def set(self) -> None:
        self._set = True
        for waiter in self._waiters:
            _resolve(waiter)

    def add_waiter(self, waiter: asyncio.Future[None]) -> None:
        """``waiter`` resolves at the next set() (a wait on several things)."""
        self._waiters.add(waiter)

    def discard_waiter(self, waiter: asyncio.Future[None]) -> None:
        self._waiters.discard(waiter)

    def clear(self) -> None:
        self._set = False

    def is_set(self) -> bool:
        return self._set

    async def wait(self) -> None:
        if self._set:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.add(waiter)
        try:
            await waiter
        finally:
            self._waiters.discard(waiter)


class Stopping:
    def __init__(self) -> None:
        self._event = Wake()

    def set(self) -> None:
        self._event.set()

    def __call__(self) -> bool:
        """Whether stop was requested (the maintenance services' ``stopping``)."""
        return self._event.is_set()

    async def sleep(self, seconds: float) -> None:
        """Sleep ``seconds``, or less if stop is requested meanwhile."""
        await self.wait_for(None, seconds)

    async def until_stopped(self, coroutine: Coroutine[Any, Any, None]) -> None:
        """Run ``coroutine`` until it ends or stop is requested; then it is
        cancelled (a wait with no deadline of its own: LISTEN's)."""
        task = asyncio.ensure_future(coroutine)
        stopped = asyncio.ensure_future(self._event.wait())
        try:
            await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if not task.cancelled():
            task.result()  # its error, if it failed

    async def wait_for(self, event: Wake | None, timeout: float | None) -> None:
        """Until ``event`` is set, ``timeout`` passes, or stop is requested."""
        if self._event.is_set() or (event is not None and event.is_set()):
            return
        # One future that stop, the event and the deadline each resolve; a
        # cancellation of this wait reaches the await below as it is.
        loop = asyncio.get_running_loop()
        woken: asyncio.Future[None] = loop.create_future()
        wakes = [self._event] if event is None else [self._event, event]
        for wake in wakes:
            wake.add_waiter(woken)
        timer = None if timeout is None else loop.call_later(timeout, _resolve, woken)
        try:
            await woken
        finally:
            if timer is not None:
                timer.cancel()
            for wake in wakes:
                wake.discard_waiter(woken)

