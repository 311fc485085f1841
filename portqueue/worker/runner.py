"""The runners: one task per claimed job, its handler bounded by its timeout,
its outcome handed to the completer.

Async handlers run on the worker's loop, sync ones in a thread pool. A
handler inside ``job.transaction()`` writes its own completion in its
transaction (``Settled``), or learns that COMMIT went unanswered (``Unsure``).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Coroutine, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from portqueue import worker_operations as ops
from portqueue.driver import execute_async, execute_sync
from portqueue.metrics import hooks
from portqueue.settings import Settings
from portqueue.worker.demand import Demand
from portqueue.worker.handlers import HandlerConnections
from portqueue.worker.job import AsyncJob, Job, JobReport
from portqueue.worker.outcomes import (
    Completion,
    Outcome,
    Settled,
    completion,
    failure,
    raised,
    unreadable,
    unsettled,
)
from portqueue.worker.registry import QueueSpec
from portqueue.worker.signal import SignalState
from portqueue.worker.state import Claimed, Running, RunningJobs

HANDLER_UNWIND_SECONDS = 5.0


def _runner_task(coroutine: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
    """A job's runner task. On Python 3.12+ it starts eagerly: a handler that
    finishes without suspending (a fast one) completes right here, without a
    trip through the loop's ready queue; one that suspends continues as any
    task would."""
    loop = asyncio.get_running_loop()
    if sys.version_info >= (3, 12):
        return asyncio.Task(coroutine, loop=loop, eager_start=True)
    return loop.create_task(coroutine)


class Runners:
    def __init__(self, settings: Settings, queues: Mapping[str, QueueSpec], jobs: RunningJobs,
                 demand: Demand, handlers: HandlerConnections,
                 on_outcome: Callable[[Outcome], None], touch_soon: Callable[[], None]) -> None:
        self._settings = settings
        self._queues = queues
        self._jobs = jobs
        self._demand = demand
        self._handlers = handlers
        self._on_outcome = on_outcome
        self._touch_soon = touch_soon
        self._loop = asyncio.get_running_loop()
        threads = sum(spec.concurrency for spec in queues.values() if not spec.is_async)
        self._thread_count = max(threads, 1) + 4
        self._threads = self._thread_pool()
        self._tasks: set[asyncio.Task[None]] = set()
        # Async handler calls still running, including ones past their timeout.
        self._async_calls: set[asyncio.Future[Any]] = set()

    def start(self, claimed: Claimed, traced: bool) -> None:
        spec = self._queues[claimed.queue]
        state = SignalState()
        if claimed.cancel_requested:
            state.set("cancelled")
        running = Running(claimed, spec, state, JobReport(self._touch_soon), traced)
        self._jobs.add(running)
        self._demand.started(claimed.queue)
        task = _runner_task(self._run(running))
        if task.done():
            # Finished eagerly, here: nothing to keep or cancel, and a done
            # callback on a done task would cost two trips through the loop.
            return
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if spec.is_async and self._timeout(running) is None:
            # Runs its handler in its own task (see _call_with_timeout): the
            # task is the call stop() cancels if it outlives the drain.
            self._async_calls.add(task)
            task.add_done_callback(self._async_calls.discard)

    async def cancel_async_handlers(self) -> None:
        """Async handlers still running after the drain (their jobs released or
        timed out) are cancelled and given a moment to unwind, so a handler's
        open job.transaction() is rolled back and its connection returned
        before the pools close: a destroyed task would leave the transaction
        open on the server, holding its locks."""
        calls = [call for call in self._async_calls if not call.done()]
        for call in calls:
            call.cancel()
        if calls:
            await asyncio.wait(calls, timeout=HANDLER_UNWIND_SECONDS)
        stuck = [call for call in calls if not call.done()]
        if stuck:
            await self._handlers.close_held_async(len(stuck))

    def close(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)

    async def _run(self, running: Running) -> None:
        try:
            outcome = await self._call_with_timeout(running)
        finally:
            self._jobs.remove(running)
            self._demand.finished(running.claimed.queue)
        if outcome is not None and not running.settled:
            running.settled = True
            self._on_outcome(outcome)

    @staticmethod
    def _timeout(running: Running) -> int | None:
        # The job's own timeout, else this worker's declared one: a job added
        # before any worker wrote the queue's defaults stored none, and would
        # otherwise run unbounded under a handler declared with a timeout.
        return running.claimed.timeout_seconds or running.spec.timeout_seconds

    async def _call_with_timeout(self, running: Running) -> Outcome | None:
        timeout = self._timeout(running)
        if timeout is None:
            # Nothing to enforce: the handler runs in the runner's own task,
            # sparing a second task and a wait per job on the hot path.
            if running.spec.is_async:
                return await self._invoke_async(running)
            return await self._loop.run_in_executor(self._threads, self._invoke_sync, running)
        if running.spec.is_async:
            call: asyncio.Future[Outcome] = asyncio.ensure_future(self._invoke_async(running))
            self._async_calls.add(call)
            call.add_done_callback(self._async_calls.discard)
        else:
            call = asyncio.ensure_future(self._loop.run_in_executor(
                self._threads, self._invoke_sync, running))
        done, _ = await asyncio.wait({call}, timeout=timeout)
        if call in done:
            return call.result()
        # The attempt fails now and its slot is freed, whether or not the
        # handler heeds its signal; its late result is fenced out.
        running.state.set("timeout")
        if running.spec.is_async:
            call.cancel()
        else:
            call.add_done_callback(lambda _: None)
            self._retire_thread_pool()
        return failure(running, TimeoutError(f"handler exceeded timeout_seconds={timeout}"))

    def _thread_pool(self) -> ThreadPoolExecutor:
        return ThreadPoolExecutor(max_workers=self._thread_count,
                                  thread_name_prefix="portqueue-handler")

    def _retire_thread_pool(self) -> None:
        """A timed-out sync handler keeps its thread until it returns. Later jobs
        get a fresh pool: enough stuck handlers would otherwise hold every thread,
        and each new job would wait in the queue and time out, never run. The
        retired pool ends as its threads finish."""
        retired, self._threads = self._threads, self._thread_pool()
        retired.shutdown(wait=False)

    def _invoke_sync(self, running: Running) -> Outcome:
        try:
            job = Job(running.claimed, running.report, running.state,
                      self._handlers.sync_connection)
        except ValueError as exc:
            return unreadable(running, exc)
        running.job = job
        try:
            with hooks.running(running.claimed, running.traced, self._settings.dsn):  # run span
                result = running.spec.handler(job)
        except BaseException as exc:  # SystemExit, KeyboardInterrupt too: never left active
            job.close_transaction(commit=False)
            return raised(running, exc)
        outcome = completion(running, result, self._settings.max_payload_bytes)
        if job.open_transaction is None or not isinstance(outcome, Completion):
            job.close_transaction(commit=False)
            return outcome
        completed = False
        try:
            rows = execute_sync(job.open_transaction,
                                ops.complete_jobs(self._settings.queries, [outcome.as_json()]))
            completed = bool(ops.completed_ids(rows))
            job.close_transaction(commit=completed)
        except BaseException as exc:
            job.close_transaction(commit=False)
            return unsettled(running, outcome, exc, committing=completed)
        return Settled(running, completed=completed, status=outcome.status)

    async def _invoke_async(self, running: Running) -> Outcome:
        try:
            job = AsyncJob(running.claimed, running.report, running.state,
                           self._handlers.async_connection)
        except ValueError as exc:
            return unreadable(running, exc)
        running.job = job
        try:
            with hooks.running(running.claimed, running.traced, self._settings.dsn):
                result = await running.spec.handler(job)
        except BaseException as exc:  # CancelledError included: recorded, never left active
            await job.close_transaction(commit=False)
            return raised(running, exc)
        outcome = completion(running, result, self._settings.max_payload_bytes)
        if job.open_transaction is None or not isinstance(outcome, Completion):
            await job.close_transaction(commit=False)
            return outcome
        completed = False
        try:
            rows = await execute_async(
                job.open_transaction,
                ops.complete_jobs(self._settings.queries, [outcome.as_json()]))
            completed = bool(ops.completed_ids(rows))
            await job.close_transaction(commit=completed)
        except BaseException as exc:
            await job.close_transaction(commit=False)
            return unsettled(running, outcome, exc, committing=completed)
        return Settled(running, completed=completed, status=outcome.status)
