"""A claimed job and the worker's bookkeeping for it while it runs."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from portqueue.operations import retry_policy_of
from portqueue.types import RetryPolicy
from portqueue.worker.job import AsyncJob, Job, JobReport
from portqueue.worker.registry import QueueSpec
from portqueue.worker.signal import SignalState


@dataclass(frozen=True)
class Claimed:
    id: str
    queue: str
    data_json: str
    attempt: int
    max_attempts: int
    group_id: str | None
    lease_token: int
    timeout_seconds: int | None
    cancel_requested: bool
    # The claim's row: its retry columns are decoded only when an attempt
    # fails (see ``retry``), not for every job claimed.
    row: Mapping[str, Any] = field(repr=False, compare=False)
    # The add span's trace context: the run span's parent (portqueue.metrics).
    traceparent: str | None = None

    @functools.cached_property
    def retry(self) -> RetryPolicy:
        retry = retry_policy_of(dict(self.row))
        assert retry is not None, "a job always has max_attempts"
        return retry

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Claimed:
        return cls(
            id=row["id"],
            queue=row["queue"],
            data_json=row["data"],
            attempt=row["attempt"],
            max_attempts=row["max_attempts"],
            group_id=row["group_id"],
            lease_token=row["lease_token"],
            timeout_seconds=row["timeout_seconds"],
            cancel_requested=row["cancel_requested"],
            row=row,
            traceparent=row.get("traceparent"),
        )


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
