"""The one event a client fires itself: ``job_cancelled`` for a pending job it
cancelled (no worker ever runs such a job, so none could fire it).

Every other event comes from the worker that ran the job (see
``portqueue/worker/events.py``). Here the callbacks run in the caller's thread
(sync client) or task (async client), after the cancel committed, one after the
other; an exception in a callback is logged and otherwise ignored, as in a worker.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

log = logging.getLogger("portqueue.client")


def fire_sync(event: str, callbacks: Sequence[Callable[..., Any]], *args: Any) -> None:
    for callback in callbacks:
        try:
            result = callback(*args)
            if asyncio.iscoroutine(result):
                # A coroutine function registered on the sync client: no loop
                # of ours to await it on, so it gets one of its own.
                asyncio.run(result)
        except Exception:
            log.exception("%s callback %r raised", event, callback)


async def fire_async(event: str, callbacks: Sequence[Callable[..., Any]], *args: Any) -> None:
    for callback in callbacks:
        try:
            result = callback(*args)
            if asyncio.iscoroutine(result):
                await result
        except Exception:
            log.exception("%s callback %r raised", event, callback)
