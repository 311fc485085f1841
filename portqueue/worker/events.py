"""Event dispatch: the callbacks registered for job_started, job_completed, … run
here, off the worker's hot path.

Each event batch reads its jobs' snapshots in one statement, then calls every
callback with each snapshot. Async callbacks run on the worker's loop; sync
ones on one thread of their own, one at a time and in order, never on the
loop: a slow one would stall claims, heartbeats and completions.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg

from portqueue import operations
from portqueue import worker_operations as ops
from portqueue.queries import Queries
from portqueue.worker.connections import Connections
from portqueue.worker.registry import Registry

log = logging.getLogger("portqueue.worker")


class EventDispatch:
    def __init__(self, registry: Registry, connections: Connections, queries: Queries,
                 worker_id: str) -> None:
        self._registry = registry
        self._connections = connections
        self.q = queries
        self._worker_id = worker_id
        self._background: set[asyncio.Task[None]] = set()
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="portqueue-callbacks")

    def emit_later(self, event: str, job_ids: list[str],
                   errors: Mapping[str, dict[str, Any]] | None = None) -> None:
        """Call ``event``'s callbacks for ``job_ids`` soon (nothing if it has none)."""
        callbacks = self._registry.callbacks(event)
        if callbacks:
            task = asyncio.create_task(self._emit(event, callbacks, job_ids, errors or {}))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    def close(self) -> None:
        self._thread.shutdown(wait=False, cancel_futures=True)

    async def _emit(self, event: str, callbacks: list[Callable[..., Any]], job_ids: list[str],
                    errors: Mapping[str, dict[str, Any]]) -> None:
        try:
            (rows,) = await self._connections.execute(ops.jobs_by_id(self.q, job_ids))
        except psycopg.Error as exc:
            # The connection broke under the snapshot read: the jobs' outcomes
            # are written, only their callbacks are missed; say so rather
            # than leave an unretrieved task exception.
            log.warning("worker %s: %s callbacks skipped for %d job(s): %s", self._worker_id,
                        event, len(job_ids), exc)
            return
        loop = asyncio.get_running_loop()
        for row in rows:
            snapshot = operations.job_snapshot(row)
            args: tuple[Any, ...] = (snapshot,)
            if event in ("job_failed", "job_retrying"):
                args = (snapshot, errors.get(snapshot.job_id))
            for callback in callbacks:
                try:
                    if inspect.iscoroutinefunction(callback):
                        await callback(*args)
                        continue
                    result = await loop.run_in_executor(
                        self._thread, functools.partial(callback, *args))
                    if asyncio.iscoroutine(result):
                        await result
                except Exception:
                    log.exception("%s callback %r raised", event, callback)
