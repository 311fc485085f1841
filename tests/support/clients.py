"""One test body for both clients: AsyncPortQueue driven from blocking test code."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

from portqueue import AsyncPortQueue


class BlockingAsyncClient:
    """Runs each coroutine method of an AsyncPortQueue to completion on a private loop.

    The async client is exercised for real (its pool, its awaits); only the
    test's call sites stay plain, so sync and async share every test."""

    def __init__(self, factory: Callable[[], AsyncPortQueue]) -> None:
        self._loop = asyncio.new_event_loop()
        self.inner = self._loop.run_until_complete(self._construct(factory))

    @staticmethod
    async def _construct(factory: Callable[[], AsyncPortQueue]) -> AsyncPortQueue:
        return factory()

    def run(self, awaitable: Any) -> Any:
        return self._loop.run_until_complete(awaitable)

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.inner, name)
        if inspect.iscoroutinefunction(attribute):
            return lambda *args, **kwargs: self.run(attribute(*args, **kwargs))
        return attribute

    def close(self) -> None:
        self.run(self.inner.aclose())
        self._loop.close()
