"""Where a worker's loop runs: the caller's asyncio loop, or a thread of its own.

``AsyncWorkerHost`` serves ``AsyncPortQueue``; ``ThreadWorkerHost`` serves
``PortQueue`` (the same asyncio worker on a private loop in a thread). Both
implement ``run()``: SIGTERM drains in-flight jobs, a second signal or SIGINT
aborts (signals set, unfinished jobs released to pending).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import signal
import threading
from collections.abc import Coroutine
from typing import Any

from portqueue.errors import PortQueueError
from portqueue.types import DrainResult
from portqueue.worker.drain import drain
from portqueue.worker.runtime import Worker

log = logging.getLogger("portqueue.worker")


def _fatal(worker: Worker) -> PortQueueError:
    error = PortQueueError(f"worker {worker.id} stopped after a fatal error: {worker.fatal!r}")
    error.__cause__ = worker.fatal
    return error


# How long tasks still running when an async worker's main coroutine returns
# get to end after a last cancel: the worker already gave its handlers
# HANDLER_UNWIND_SECONDS, so what is left is ignoring cancellation.
LEFTOVER_TASK_SECONDS = 1.0


def run_until_stopped(main: Coroutine[Any, Any, None]) -> None:
    """``asyncio.run(main)`` for a managed async worker, minus one trap: at the
    end asyncio.run cancels the tasks still running and waits for every one of
    them, so an async handler that swallows its cancellation would keep the
    stopped worker's process alive for as long as it likes (forever, if it
    loops). Here leftovers get LEFTOVER_TASK_SECONDS (``end_leftovers``), then
    are abandoned with a warning (the worker has released their jobs and
    closed their connections), and the process goes on to exit."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(main)
    finally:
        try:
            end_leftovers(loop)
        finally:
            asyncio.set_event_loop(None)
            loop.close()


def end_leftovers(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel the tasks still pending on a stopped worker's loop and give them
    LEFTOVER_TASK_SECONDS, before the loop closes. Without it the runner of a
    sync handler that outlived the grace period (its job released, its thread
    still running) stayed pending on the closed loop, and Python later said
    "Task was destroyed but it is pending!" wherever the collector found it."""
    leftovers = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in leftovers:
        task.cancel()
    if leftovers:
        loop.run_until_complete(asyncio.wait(leftovers, timeout=LEFTOVER_TASK_SECONDS))
    stuck = [task for task in leftovers if not task.done()]
    if stuck:
        log.warning("%d task(s) still running after the worker stopped (a handler "
                    "ignoring its cancellation); exiting without them", len(stuck))
    loop.run_until_complete(loop.shutdown_asyncgens())


class AsyncWorkerHost:
    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    async def start(self) -> None:
        await self.worker.start()

    async def stop(self, *, abort: bool = False) -> None:
        await self.worker.stop(abort=abort)

    async def drain(self, *, with_scheduled: bool, timeout_seconds: float) -> DrainResult:
        """On the caller's loop: async handlers run on it, sync ones in threads."""
        return await drain(self.worker, with_scheduled=with_scheduled,
                           timeout_seconds=timeout_seconds)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        finished = asyncio.Event()
        stopping: list[asyncio.Task[None]] = []
        # Signals heard while the worker starts, acted on once it has: with
        # the default action, a SIGTERM during a slow start-up would kill the
        # process uncleanly (-15) instead of stopping it.
        early: list[int] = []
        started = False

        def on_signal(signum: int) -> None:
            if not started:
                early.append(signum)
                # A start waiting for connections gives up instead.
                self.worker.abandon_start()
                return
            abort = signum == signal.SIGINT or bool(stopping)
            log.info("received %s: %s", signal.Signals(signum).name,
                     "aborting" if abort else "draining")
            if not stopping:
                stopping.append(asyncio.create_task(self.worker.stop(abort=abort)))
                stopping[0].add_done_callback(lambda _: finished.set())
            elif abort:
                self.worker.request_abort()

        self.worker.on_fatal = finished.set
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, on_signal, signum)
        try:
            await self.start()
            started = True
            for heard in early:
                on_signal(heard)
            await finished.wait()
            if stopping:
                await stopping[0]
            else:
                await self.worker.stop(abort=True)
        finally:
            for signum in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(signum)
        if self.worker.fatal is not None:
            raise _fatal(self.worker)


class ThreadWorkerHost:
    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._events: queue.SimpleQueue[int | str] = queue.SimpleQueue()
        self._stopping = False

    def start(self) -> None:
        self._thread = threading.Thread(target=self._main, name="portqueue-worker", daemon=True)
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            self._thread.join()
            raise self._error

    def _main(self) -> None:
        self.loop = asyncio.new_event_loop()
        try:
            self.loop.run_until_complete(self._serve())
        finally:
            try:
                end_leftovers(self.loop)
            finally:
                self.loop.close()

    async def _serve(self) -> None:
        self._stopped = asyncio.Event()
        self.worker.on_fatal = lambda: self._events.put("fatal")
        try:
            await self.worker.start()
        except BaseException as exc:
            self._error = exc
            return
        finally:
            self._ready.set()
        await self._stopped.wait()

    async def _stop(self, abort: bool) -> None:
        try:
            await self.worker.stop(abort=abort)
        finally:
            self._stopped.set()

    def stop(self, *, abort: bool = False) -> None:
        if self._thread is None or not self._thread.is_alive():
            return
        self._stopping = True
        asyncio.run_coroutine_threadsafe(self._stop(abort), self.loop).result()
        self._thread.join()

    def drain(self, *, with_scheduled: bool, timeout_seconds: float) -> DrainResult:
        """On a loop of its own in a thread (the caller may be inside a running
        loop already); returns, or raises, what the drain did."""
        outcome: list[DrainResult | BaseException] = []

        def main() -> None:
            try:
                outcome.append(asyncio.run(drain(
                    self.worker, with_scheduled=with_scheduled, timeout_seconds=timeout_seconds)))
            except BaseException as exc:
                outcome.append(exc)

        thread = threading.Thread(target=main, name="portqueue-drain", daemon=True)
        thread.start()
        thread.join()
        if isinstance(outcome[0], BaseException):
            raise outcome[0]
        return outcome[0]

    def _next_event(self) -> int | str:
        # A timed wait: the main thread stays responsive to signals on every platform.
        while True:
            try:
                return self._events.get(timeout=0.5)
            except queue.Empty:
                continue

    def run(self) -> None:
        received: list[int] = []
        aborted_while_starting: list[int] = []

        def on_signal(signum: int, frame: Any) -> None:
            # Counted here, not by _stopping: a second signal that arrives
            # before the main thread has begun the drain (SIGTERM twice in a
            # row) must still abort, not queue up behind the first unheard.
            if self._stopping or received:
                log.info("received %s: aborting", signal.Signals(signum).name)
                if self._ready.is_set():
                    self.worker.request_abort()
                else:  # the worker has no loop yet: the stop below aborts
                    aborted_while_starting.append(signum)
            else:
                if not self._ready.is_set():
                    # A start waiting for connections gives up instead.
                    self.worker.abandon_start()
                self._events.put(signum)
            received.append(signum)

        # Set before the worker starts: with the default action, a SIGTERM
        # during a slow start-up would kill the process uncleanly (-15)
        # instead of stopping it once started.
        previous = {signum: signal.signal(signum, on_signal)
                    for signum in (signal.SIGTERM, signal.SIGINT)}
        try:
            self.start()
            event = self._next_event()
            if event == "fatal":
                self.stop(abort=True)
                raise _fatal(self.worker)
            abort = event == signal.SIGINT or bool(aborted_while_starting)
            log.info("received %s: %s", signal.Signals(int(event)).name,
                     "aborting" if abort else "draining")
            self.stop(abort=abort)
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
