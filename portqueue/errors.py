"""One exception hierarchy, rooted at :class:`PortQueueError`."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from portqueue.types import JobSnapshot


class PortQueueError(Exception):
    """The root of every error portqueue raises on purpose."""


class InvalidArgument(PortQueueError, ValueError):
    """An argument was rejected before any I/O; ``argument`` names it."""

    def __init__(self, argument: str, message: str) -> None:
        super().__init__(f"{argument}: {message}")
        self.argument = argument


class PayloadTooLarge(InvalidArgument):
    """A job's encoded ``data`` is larger than the client's ``max_payload_bytes``."""


class QueuePausedError(PortQueueError):
    """The queue is paused with ``PauseMode.ALL`` and refuses new jobs."""

    def __init__(self, queue: str) -> None:
        super().__init__(f"queue {queue!r} is paused (mode ALL) and refuses new jobs")
        self.queue = queue


class JobFailedError(PortQueueError):
    """A waited-for job ended failed, cancelled or expired; ``job`` is its snapshot."""

    def __init__(self, job: JobSnapshot) -> None:
        last = job.errors[-1]["message"] if job.errors else None
        detail = f": {last}" if last else ""
        super().__init__(f"job {job.job_id} ended {job.status.value}{detail}")
        self.job = job
