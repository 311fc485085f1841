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


class Stopping:
    def __init__(self) -> None:
        self._event = asyncio.Event()

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

    async def wait_for(self, event: asyncio.Event | None, timeout: float | None) -> None:
        """Until ``event`` is set, ``timeout`` passes, or stop is requested."""
        if self._event.is_set() or (event is not None and event.is_set()):
            return
        waiters = [asyncio.ensure_future(self._event.wait())]
        if event is not None:
            waiters.append(asyncio.ensure_future(event.wait()))
        try:
            # asyncio.wait, not wait_for: it never swallows a cancellation.
            await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
