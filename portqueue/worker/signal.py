"""The handler's stop signal: set on cancel, timeout, lost lease or abort.

One state, two views: ``ThreadSignal`` for sync handlers (``wait()`` blocks a
thread) and ``AsyncSignal`` for async handlers (``await signal.wait()``).
Setting it is thread-safe and happens at most once; ``reason`` says why.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Generator
from typing import Any, Literal

Reason = Literal["cancelled", "timeout", "lease_lost", "shutdown"]


class SignalState:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Made by the first blocking wait: one state per job runs, and most
        # are never waited on (a threading.Event costs a Condition each).
        self._event: threading.Event | None = None
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self.reason: Reason | None = None

    def set(self, reason: Reason) -> bool:
        """Set the signal; False if it was set already (the first reason stays)."""
        with self._lock:
            if self.reason is not None:
                return False
            self.reason = reason
            event = self._event
            waiters, self._waiters = self._waiters, []
        if event is not None:
            event.set()
        for loop, future in waiters:
            loop.call_soon_threadsafe(_resolve, future)
        return True

    def is_set(self) -> bool:
        return self.reason is not None

    def wait_blocking(self, timeout: float | None) -> bool:
        with self._lock:
            if self.reason is not None:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)

    async def wait_async(self) -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._lock:
            if self.reason is not None:
                return
            self._waiters.append((loop, future))
        await future


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class ThreadSignal:
    """``is_set()``, ``wait(timeout=None) -> bool`` and ``reason``, for sync handlers."""

    def __init__(self, state: SignalState) -> None:
        self._state = state

    def is_set(self) -> bool:
        return self._state.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._state.wait_blocking(timeout)

    @property
    def reason(self) -> Reason | None:
        return self._state.reason


class AsyncSignal:
    """``is_set()``, ``await wait()`` (or ``await signal``) and ``reason``, for async handlers."""

    def __init__(self, state: SignalState) -> None:
        self._state = state

    def is_set(self) -> bool:
        return self._state.is_set()

    async def wait(self) -> None:
        await self._state.wait_async()

    def __await__(self) -> Generator[Any, None, None]:
        return self._state.wait_async().__await__()

    @property
    def reason(self) -> Reason | None:
        return self._state.reason
