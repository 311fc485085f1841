"""Public enums, option groups and result dataclasses."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class JobStatus(str, Enum):
    """A job's place in its life; the same values as the ``job_status`` SQL enum."""

    PENDING = "pending"
    ACTIVE = "active"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    EXPIRED = "expired"
    # Added with dependencies not all completed yet; never claimed (SPEC §9).
    WAITING = "waiting"

    @property
    def finished(self) -> bool:
        return self in FINISHED_STATUSES


FINISHED_STATUSES = frozenset(
    {JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.EXPIRED}
)


class PauseMode(str, Enum):
    """``PROCESSING`` stops claiming but keeps accepting adds; ``ALL`` also refuses adds."""

    PROCESSING = "processing"
    ALL = "all"


class BackoffStrategy(str, Enum):
    """How the delay before a retry grows with the attempt number (see ``Backoff``)."""

    FIXED = "fixed"
    LINEAR = "linear"
    EXPONENTIAL = "exponential"


class CancelOutcome(str, Enum):
    """What ``cancel_job`` did: cancelled a pending job, signalled a running one's
    handler, or found nothing to cancel (no such job, or already finished)."""

    CANCELLED = "cancelled"
    SIGNALLED = "signalled"
    NOT_FOUND = "not_found"
    ALREADY_FINISHED = "already_finished"


class DeduplicationReason(str, Enum):
    """Why an add returned an existing job or schedule instead of adding one: its
    ``idempotency_key`` (or a schedule's key), or a live job's ``singleton_key``."""

    IDEMPOTENCY = "IDEMPOTENCY"
    SINGLETON = "SINGLETON"
    # Flow control (SPEC §8): an add inside its throttle key's window, or one
    # that updated its debounce key's pending job.
    THROTTLE = "THROTTLE"
    DEBOUNCE = "DEBOUNCE"


# --- option groups (a dict with the same keys is accepted wherever these are) ---


@dataclass(frozen=True)
class Backoff:
    """Delay before attempt n+1 = delay * (1 | n | factor^(n-1)), capped, optionally jittered."""

    strategy: BackoffStrategy = BackoffStrategy.FIXED
    factor: float = 2.0
    max_delay_seconds: int | None = None
    jitter: bool = False


@dataclass(frozen=True)
class RetryPolicy:
    """``max_attempts`` counts every attempt, the first included (1 = no retry)."""

    max_attempts: int = 1
    delay_seconds: int = 0
    backoff: Backoff = field(default_factory=Backoff)


FOREVER = 2_147_483_647
"""Keep forever: as a ``Retention`` ttl, the age rule never deletes the job; as
``keep_completed`` / ``keep_failed``, no count cap applies (not even the
client's). The largest value the integer columns hold, so SQL readers see it
as a number of seconds (about 68 years); docs/retention.md."""


@dataclass(frozen=True)
class Retention:
    """How long a finished job is kept; ``ttl_seconds=0`` prunes it on the next pass.

    ``completed_ttl_seconds`` applies to jobs that end ``completed``,
    ``failed_ttl_seconds`` to ``failed``, ``cancelled`` and ``expired`` ones; each
    wins over ``ttl_seconds`` at the same level. ``FOREVER`` as a ttl keeps the
    job from the age rule, as a ``keep_*`` cap turns a client-wide cap off."""

    ttl_seconds: int | None = None
    keep_completed: int | None = None
    keep_failed: int | None = None
    completed_ttl_seconds: int | None = None
    failed_ttl_seconds: int | None = None


@dataclass(frozen=True)
class CronSpec:
    """A cron ``pattern`` (five fields) evaluated in the IANA time zone ``tz``."""

    pattern: str
    tz: str = "UTC"


@dataclass(frozen=True)
class Schedule:
    """Exactly one mode: a one-off delay or start time, a recurring interval or cron."""

    start_after_seconds: int | None = None
    start_every_seconds: int | None = None
    cron: str | CronSpec | None = None
    # Recurring only. None: a tick missed while no scheduler ran is spawned once,
    # however late. N: a tick found more than N seconds late is skipped.
    misfire_grace_seconds: int | None = None
    # Recurring only: the schedule's name within its queue. Adding a schedule
    # with the key of an existing one updates that one (declare-at-deploy).
    key: str | None = None
    # One-off: an aware datetime to start at (a past one means now), read
    # against the database clock when the job is added.
    start_at: datetime | None = None

    @property
    def recurring(self) -> bool:
        return self.start_every_seconds is not None or self.cron is not None


@dataclass(frozen=True)
class RateLimit:
    """At most ``limit`` jobs of the queue start in any window of ``period_seconds``,
    across every worker; per ``partition_key`` when ``per_partition`` (jobs
    without a key are then not rate-limited)."""

    limit: int
    period_seconds: int
    per_partition: bool = False


@dataclass(frozen=True)
class Throttle:
    """At most one job per ``key`` is created per window of ``seconds`` from the
    window's first add; later adds in it return that job (``"THROTTLE"``)."""

    key: str
    seconds: int


@dataclass(frozen=True)
class Debounce:
    """The job starts ``seconds`` after the last add of its ``key``: each add while
    it is pending replaces its data and moves its start, never past its first add
    plus ``max_wait_seconds`` (``None``: no cap); it returns that job
    (``"DEBOUNCE"``). Once the job has started, the next add creates a new one."""

    key: str
    seconds: int
    max_wait_seconds: int | None = None


# --- results ---


@dataclass(frozen=True)
class AddJobResult:
    """What an add did. A one-off job: its ``job_id``, ``status`` and ``start_after``.
    A recurring add: ``job_id`` is ``None``, ``schedule_id`` and ``next_run_at`` are set.
    ``deduplicated`` (with ``deduplication_reason``): an existing job or schedule was
    returned instead of a new one. ``created_at``: the job's ``created_at`` on the
    database clock (as ``get_job`` reads it) for a one-off add, new or deduplicated;
    ``None`` for a recurring add and for ``retry_job``'s result."""

    job_id: str | None
    queue: str
    status: JobStatus | None
    start_after: datetime | None
    deduplicated: bool = False
    deduplication_reason: DeduplicationReason | None = None
    schedule_id: str | None = None
    next_run_at: datetime | None = None
    created_at: datetime | None = None


@dataclass(frozen=True)
class JobSnapshot:
    """A job's row as read: every column a user needs, datetimes aware (UTC).

    ``errors`` has one entry per failed attempt (type, message, traceback,
    attempt, when), newest last; ``output`` is the handler's return value;
    ``source_job_id`` names the job a dead-letter copy came from;
    ``scheduled_for`` is the tick a schedule spawned it for."""

    job_id: str
    queue: str
    status: JobStatus
    data: Any
    priority: int
    attempt: int
    max_attempts: int
    group_id: str | None
    idempotency_key: str | None
    singleton_key: str | None
    preferred_instance_key_pattern: str | None
    schedule_id: str | None
    created_at: datetime
    start_after: datetime
    started_at: datetime | None
    finished_at: datetime | None
    expire_at: datetime | None
    retention_ttl_seconds: int | None
    output: Any
    errors: list[dict[str, Any]]
    progress: float | None
    attrs: dict[str, Any]
    cancel_requested: bool
    source_job_id: str | None
    retry: RetryPolicy
    timeout_seconds: int | None
    scheduled_for: datetime | None
    retention_completed_ttl_seconds: int | None = None
    retention_failed_ttl_seconds: int | None = None
    # Workflows (SPEC §9): the jobs this one waits for, and the flow it belongs to.
    depends_on: list[str] = field(default_factory=list)
    flow_id: str | None = None


@dataclass(frozen=True)
class QueueStats:
    """Jobs per status (every ``JobStatus``, zeros included; delayed jobs count as
    pending), the pause mode, and how long the oldest ready job has waited."""

    queue: str
    counts: dict[JobStatus, int]
    paused: PauseMode | None
    oldest_pending_seconds: float | None


@dataclass(frozen=True)
class QueueInfo:
    """A queue's row: its pause mode and the defaults a worker declared for it
    (``None`` where none was declared)."""

    queue: str
    paused: PauseMode | None
    created_at: datetime
    concurrency: int | None
    retry: RetryPolicy | None
    expire_in_seconds: int | None
    retention: Retention
    timeout_seconds: int | None
    lease_seconds: int | None
    dead_letter_queue: str | None
    # Flow control (SPEC §8), honoured by every worker; None: no such limit.
    global_concurrency: int | None = None
    partition_concurrency: int | None = None
    rate_limit: RateLimit | None = None

    def limits_text(self) -> str:
        """The flow-control limits in a few words, as the CLI and dashboard show
        them ("global 20, per key 1, 100/60s"); "-" when there are none."""
        parts = []
        if self.global_concurrency is not None:
            parts.append(f"global {self.global_concurrency}")
        if self.partition_concurrency is not None:
            parts.append(f"per key {self.partition_concurrency}")
        if self.rate_limit is not None:
            rate = self.rate_limit
            parts.append(f"{rate.limit}/{rate.period_seconds}s"
                         + (" per key" if rate.per_partition else ""))
        return ", ".join(parts) or "-"


@dataclass(frozen=True)
class ScheduleInfo:
    """A recurring schedule: cron (with ``tz``) or ``every_seconds``, its next and last
    tick, the data of the jobs it spawns, and its key (``idempotency_key``)."""

    schedule_id: str
    queue: str
    cron: str | None
    tz: str
    every_seconds: int | None
    next_run_at: datetime
    last_run_at: datetime | None
    last_job_id: str | None
    enabled: bool
    data: Any
    idempotency_key: str | None
    created_at: datetime
    misfire_grace_seconds: int | None = None


@dataclass(frozen=True)
class CancelResult:
    """The outcome of ``cancel_job`` for ``job_id``."""

    job_id: str
    outcome: CancelOutcome


@dataclass(frozen=True)
class FetchedJob:
    """A job ``fetch_jobs`` claimed for a pull consumer. ``lease_token`` fences
    its writes (``complete_job``, ``fail_job``, ``extend_lease``) as a worker's
    are fenced; the lease lapses at ``lease_expires_at`` (database clock, UTC)
    unless extended, and the job is then rescued like a worker's."""

    job_id: str
    queue: str
    data: Any
    attempt: int
    max_attempts: int
    lease_token: int
    lease_expires_at: datetime


class CancelCounts(int):
    """What ``cancel_jobs`` did: an ``int``, the jobs it acted on (``cancelled``
    plus ``signalled``), that also says how many of each, and how many of the
    jobs it looked at had finished already or, by id, were not found."""

    cancelled: int
    signalled: int
    already_finished: int
    not_found: int

    def __new__(cls, cancelled: int = 0, signalled: int = 0, already_finished: int = 0,
                not_found: int = 0) -> CancelCounts:
        counts = super().__new__(cls, cancelled + signalled)
        counts.cancelled, counts.signalled = cancelled, signalled
        counts.already_finished, counts.not_found = already_finished, not_found
        return counts

    def __repr__(self) -> str:
        return (f"CancelCounts(cancelled={self.cancelled}, signalled={self.signalled}, "
                f"already_finished={self.already_finished}, not_found={self.not_found})")


@dataclass(frozen=True)
class Page(Generic[T]):
    """One window of a list read; another page follows while offset + len(items) < total."""

    items: list[T]
    total: int


@dataclass(frozen=True)
class DrainResult:
    """What ``drain()`` ran, by outcome: ``completed``, ``failed`` (attempts spent),
    ``retried`` (failed attempts that will run again), ``cancelled`` (a ``Cancel``
    raised or a cancel request honoured) and ``snoozed`` (a ``Snooze`` raised)."""

    completed: int = 0
    failed: int = 0
    retried: int = 0
    cancelled: int = 0
    snoozed: int = 0


# --- workflows (SPEC §9) ---


class FlowStatus(str, Enum):
    """``RUNNING`` until every job of the flow has finished; then ``COMPLETED`` when
    all completed, else ``FAILED``."""

    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"


@dataclass(frozen=True)
class FlowResult:
    """What ``add_flow`` added: the flow's id and each entry's result, by its key."""

    flow_id: str
    jobs: dict[str, AddJobResult]


@dataclass(frozen=True)
class FlowSnapshot:
    """A flow as read: its status and each job's snapshot, by its key."""

    flow_id: str
    status: FlowStatus
    jobs: dict[str, JobSnapshot]
