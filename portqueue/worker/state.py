"""A claimed job and the worker's bookkeeping for it while it runs."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import psycopg
from psycopg.rows import RowMaker

from portqueue.driver import column_names
from portqueue.operations import retry_policy_of
from portqueue.types import RetryPolicy
from portqueue.worker.job import AsyncJob, Job, JobReport
from portqueue.worker.registry import QueueSpec
from portqueue.worker.signal import SignalState
from portqueue.worker_operations import Lease


class Claimed(NamedTuple):
    """A claimed job: one row of the claim, its columns in this order (see
    ``rows``), built as a tuple with no per-row dict or per-field setattr."""

    id: str
    queue: str
    status: str  # 'active'; 'expired' for a job found past its expire_at; 'unjudged' (patterns.py)
    data_json: str
    attempt: int
    max_attempts: int
    group_id: str | None
    lease_token: int
    timeout_seconds: int | None
    retry_delay_seconds: int
    backoff_strategy: str
    backoff_factor: float
    backoff_max_delay_seconds: int | None
    backoff_jitter: bool
    cancel_requested: bool
    # The add span's trace context: the run span's parent (portqueue.metrics).
    traceparent: str | None
    # The outputs of its dependencies, by key or id (job.parent_outputs); None
    # for a job without dependencies.
    parent_outputs_json: str | None = None

    @property
    def retry(self) -> RetryPolicy:
        """Decoded only when an attempt fails, not for every job claimed."""
        retry = retry_policy_of(self._asdict())
        if retry is None:  # the claim always returns max_attempts
            raise ValueError(f"job {self.id}: the claim returned no retry policy")
        return retry

    @classmethod
    def rows(cls, cursor: psycopg.AsyncCursor[Any]) -> RowMaker[Claimed]:
        """The claim's row factory; its columns must be these fields, in order."""
        names = tuple(column_names(cursor))
        if names and names != cls._fields:
            raise psycopg.ProgrammingError(f"the claim returned {names}, not {cls._fields}")
        return cls._make


@dataclass(eq=False)
class Running:
    claimed: Claimed
    spec: QueueSpec
    state: SignalState
    report: JobReport
    traced: bool = False  # a run span is opened (hooks.tracing_on() at claim)
    job: Job | AsyncJob | None = None
    # Set once an outcome for this attempt is decided (written, timed out,
    # released, lease lost): any later outcome of the handler is dropped.
    settled: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def lease(self) -> Lease:
        return Lease(self.claimed.id, self.claimed.lease_token)


class RunningJobs:
    """The jobs this worker runs now, by id (the runners add and remove them;
    the heartbeat, the listener and stop() read them). ``idle`` is set while
    none runs."""

    def __init__(self) -> None:
        self._by_id: dict[str, Running] = {}
        self.idle = asyncio.Event()
        self.idle.set()

    def add(self, running: Running) -> None:
        self._by_id[running.claimed.id] = running
        self.idle.clear()

    def remove(self, running: Running) -> None:
        self._by_id.pop(running.claimed.id, None)
        if not self._by_id:
            self.idle.set()

    def get(self, job_id: str) -> Running | None:
        return self._by_id.get(job_id)

    def unsettled(self) -> list[Running]:
        return [running for running in self._by_id.values() if not running.settled]

    def __len__(self) -> int:
        return len(self._by_id)

    def __iter__(self) -> Iterator[Running]:
        return iter(list(self._by_id.values()))
