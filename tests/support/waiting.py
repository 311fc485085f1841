"""Waiting on a condition with a deadline, never for a fixed time.

Tests never ``sleep`` to let something happen: they poll a predicate (usually
a read of the row) every few milliseconds until it holds or the deadline
passes, and the failure names what was awaited and the last value seen.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

T = TypeVar("T")

POLL_SECONDS = 0.01


def wait_until(
    predicate: Callable[[], T], timeout: float = 5.0, what: str = "condition",
    interval: float = POLL_SECONDS,
) -> T:
    """Call ``predicate`` until it returns something truthy, and return that.

    Raises ``AssertionError`` naming ``what`` when ``timeout`` seconds pass first."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what} "
                                 f"(last value: {value!r})")
        time.sleep(interval)


@overload
async def wait_until_async(
    predicate: Callable[[], Awaitable[T]], timeout: float = ..., what: str = ...,
    interval: float = ...,
) -> T: ...
@overload
async def wait_until_async(
    predicate: Callable[[], T], timeout: float = ..., what: str = ..., interval: float = ...,
) -> T: ...
async def wait_until_async(
    predicate: Callable[[], Any], timeout: float = 5.0, what: str = "condition",
    interval: float = POLL_SECONDS,
) -> Any:
    """``wait_until`` for async tests: yields to the loop between polls (so a
    worker running on the test's loop makes progress); ``predicate`` may be
    sync or return an awaitable."""
    deadline = time.monotonic() + timeout
    while True:
        value: Any = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what} "
                                 f"(last value: {value!r})")
        await asyncio.sleep(interval)


def in_background(target: Callable[[], None]) -> threading.Thread:
    """``target`` started on a daemon thread (a test joins it with a timeout)."""
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread
