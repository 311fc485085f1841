"""portqueue: a PostgreSQL-native, transactional job queue for Python."""

from portqueue.async_client import AsyncPortQueue
from portqueue.client import PortQueue
from portqueue.errors import (
    DatabaseUnavailable,
    InvalidArgument,
    JobFailedError,
    PayloadTooLarge,
    PortQueueError,
    QueuePausedError,
)
from portqueue.types import (
    AddJobResult,
    Backoff,
    BackoffStrategy,
    CancelOutcome,
    CancelResult,
    CronSpec,
    DeduplicationReason,
    JobSnapshot,
    JobStatus,
    Page,
    PauseMode,
    QueueInfo,
    QueueStats,
    Retention,
    RetryPolicy,
    Schedule,
    ScheduleInfo,
)

__all__ = [
    "AddJobResult",
    "AsyncPortQueue",
    "Backoff",
    "BackoffStrategy",
    "CancelOutcome",
    "CancelResult",
    "CronSpec",
    "DatabaseUnavailable",
    "DeduplicationReason",
    "InvalidArgument",
    "JobFailedError",
    "JobSnapshot",
    "JobStatus",
    "Page",
    "PauseMode",
    "PayloadTooLarge",
    "PortQueue",
    "PortQueueError",
    "QueueInfo",
    "QueueStats",
    "QueuePausedError",
    "Retention",
    "RetryPolicy",
    "Schedule",
    "ScheduleInfo",
]
