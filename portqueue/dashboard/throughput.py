"""A queue's recent throughput, estimated through the public read API.

The client has no "finished per minute" read, so this samples the queue's
newest settled jobs (``get_jobs``, newest first) and counts those whose
``finished_at`` falls in the last minute. With first-in-first-out draining the
newest settled jobs are also the most recently finished, so the estimate is
exact up to the sample size; when the whole sample is inside the window the
page shows it as a lower bound ("≥ 100/min"). The window is measured against
the dashboard host's clock, which may differ slightly from the database's.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from portqueue.async_client import AsyncPortQueue
from portqueue.types import JobStatus

SAMPLE_SIZE = 100
WINDOW = timedelta(minutes=1)
_SETTLED = [JobStatus.COMPLETED, JobStatus.FAILED]


@dataclass(frozen=True)
class Throughput:
    per_minute: int
    at_least: bool  # the whole sample fell inside the window: the true rate may be higher

    def __str__(self) -> str:
        return f"{'≥ ' if self.at_least else ''}{self.per_minute}/min"


async def recent_throughput(client: AsyncPortQueue, queue: str) -> Throughput:
    """Jobs of ``queue`` completed or failed in the last minute."""
    page = await client.get_jobs(queue=queue, statuses=_SETTLED, limit=SAMPLE_SIZE)
    since = datetime.now(timezone.utc) - WINDOW
    recent = sum(
        1 for job in page.items if job.finished_at is not None and job.finished_at >= since)
    return Throughput(per_minute=recent, at_least=recent == SAMPLE_SIZE)
