"""``portqueue demo``: a producer and a worker in one process, on a throwaway schema.

The demo is portqueue used as an application would use it (the public
client, handlers, ``start``/``stop``, ``cancel_job``, events), plus two
numbers read from the job rows. What it runs, for ``jobs`` = N:

- most jobs succeed after a few milliseconds of work (an ``async def`` handler);
- about 10 % (at most 100) fail on their first attempt and succeed on the retry;
- about 2 % (at most 20) fail every attempt: after 3 attempts (backoff 1 s,
  then 2 s) they end ``failed`` and a copy lands in the dead-letter queue;
- one job is delayed by two seconds;
- one long job (a sync handler reporting progress) is cancelled while it runs.

Two phases make the two numbers mean something: a burst of jobs added in one
statement measures throughput (first add to last finish), then jobs added one
by one to an idle worker measure commit-to-start latency.

The schema (``portqueue_demo`` by default) is dropped and recreated on every
run; the demo refuses to drop a schema it did not create.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
from rich.console import Console
from rich.logging import RichHandler
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from portqueue import AsyncJob, Job
from portqueue import demo_operations as ops
from portqueue.client import PortQueue
from portqueue.driver import execute_sync
from portqueue.errors import PortQueueError
from portqueue.migrate import migrate
from portqueue.operations import added_job_id
from portqueue.queries import queries_for
from portqueue.types import CancelOutcome, JobSnapshot, JobStatus

DEFAULT_SCHEMA = "portqueue_demo"
DEFAULT_JOBS = 300
MIN_JOBS = 10
MAX_JOBS = 20_000

WORK_QUEUE = "demo"
LONG_QUEUE = "demo-long"
DEAD_QUEUE = "demo-dead"
SCHEMA_MARK = "portqueue demo: dropped and recreated by every run of portqueue demo"

WORK_CONCURRENCY = 20
DELAY_SECONDS = 2
# Retries and delayed jobs get no NOTIFY (they are not ready at commit): the
# poll finds them. A short poll keeps the demo's tail short.
POLL_INTERVAL = 0.2
# Between two one-by-one adds: slow enough that each finds an idle worker.
TRICKLE_PAUSE = 0.01
FINISH_TIMEOUT = 40.0
LONG_JOB_SECONDS = 15.0


class DemoError(PortQueueError):
    """The demo could not run (a schema it must not drop, another demo running)."""


class DemoFailure(Exception):
    """Raised by the demo's handlers on purpose."""


@dataclass(frozen=True)
class Plan:
    """How many jobs of each kind; ``total`` of them in all."""

    total: int
    burst: int
    trickle: int
    flaky: int
    broken: int
    delayed: int = 1
    long: int = 1

    @classmethod
    def for_jobs(cls, total: int) -> Plan:
        if not MIN_JOBS <= total <= MAX_JOBS:
            raise ValueError(f"jobs: must be from {MIN_JOBS} to {MAX_JOBS}, got {total}")
        # Capped: the one-by-one adds are paced, and a big --jobs should
        # mostly grow the burst.
        broken = min(max(1, total // 50), 20)
        flaky = min(max(1, total // 10), 100)
        trickle = min(max(5, total // 6), 200)
        burst = total - broken - flaky - trickle - 2
        return cls(total=total, burst=burst, trickle=trickle, flaky=flaky, broken=broken)

    @property
    def expected(self) -> dict[str, dict[JobStatus, int]]:
        """The final count per queue and status when everything behaves."""
        return {
            WORK_QUEUE: {JobStatus.COMPLETED: self.total - self.broken - self.long,
                         JobStatus.FAILED: self.broken},
            LONG_QUEUE: {JobStatus.CANCELLED: self.long},
            DEAD_QUEUE: {JobStatus.PENDING: self.broken},
        }


@dataclass
class Summary:
    plan: Plan
    counts: dict[str, dict[JobStatus, int]]
    throughput_jobs: int
    throughput_seconds: float
    latency_jobs: int
    p50_seconds: float | None
    p99_seconds: float | None
    cancel_outcome: CancelOutcome | None
    long_progress: float | None
    delayed_wait_seconds: float | None
    wall_seconds: float

    def unexpected(self) -> list[str]:
        """How the final counts differ from the plan's (empty: all as planned)."""
        problems = []
        for queue, expected in self.plan.expected.items():
            actual = {status: n for status, n in self.counts.get(queue, {}).items() if n}
            if actual != expected:
                problems.append(f"{queue}: expected {_counts_text(expected)}, "
                                f"got {_counts_text(actual)}")
        if self.cancel_outcome is not CancelOutcome.SIGNALLED:
            problems.append(f"cancel_job on the running long job returned {self.cancel_outcome}")
        return problems


def _counts_text(counts: dict[JobStatus, int]) -> str:
    return ", ".join(f"{n} {status.value}" for status, n in counts.items()) or "nothing"


# --- handlers ---


async def work(job: AsyncJob) -> dict[str, Any]:
    """The demo queue's handler: a few milliseconds of work, failing on purpose."""
    await asyncio.sleep(random.uniform(0.001, 0.005))
    kind = job.data["kind"]
    if kind == "flaky" and job.attempt == 1:
        raise DemoFailure("flaky on purpose: fails its first attempt only")
    if kind == "broken":
        raise DemoFailure("broken on purpose: fails every attempt")
    return {"n": job.data["n"], "attempt": job.attempt}


def long_job(job: Job) -> dict[str, Any]:
    """A sync handler that reports progress and stops when its signal is set."""
    steps = int(LONG_JOB_SECONDS / 0.05)
    for step in range(steps):
        job.set_progress(step / steps)
        if job.signal.wait(0.05):
            # A return after a cancel request ends the job cancelled.
            return {"stopped": job.signal.reason, "at_step": step}
    return {"stopped": None, "at_step": steps}


# --- the run ---


def _lock_key(schema: str) -> int:
    return zlib.crc32(f"portqueue.demo:{schema}".encode())


@contextlib.contextmanager
def fresh_schema(dsn: str, schema: str) -> Iterator[str]:
    """Drop (if the demo made it) and recreate ``schema``, holding the demo's
    lock on it until the block ends; yields the server's version."""
    q = queries_for(schema)
    with psycopg.connect(dsn, autocommit=True, application_name="portqueue:demo") as conn:
        (lock,) = execute_sync(conn, ops.lock(q, key=_lock_key(schema)))
        if not lock["acquired"]:
            raise DemoError(f"another portqueue demo is running on schema {schema!r}")
        found = execute_sync(conn, ops.schema_comment(q, schema=schema))
        if found and found[0]["comment"] != SCHEMA_MARK:
            raise DemoError(
                f"schema {schema!r} exists and was not created by portqueue demo, "
                "which drops its schema on every run: pick another --schema")
        execute_sync(conn, ops.drop_schema(q))
        migrate(dsn, schema=schema)
        execute_sync(conn, ops.mark_schema(q))
        version = conn.info.server_version
        yield f"{version // 10000}.{version % 10000}"


class Demo:
    def __init__(self, dsn: str, schema: str, plan: Plan, console: Console) -> None:
        self.dsn = dsn
        self.schema = schema
        self.plan = plan
        self.console = console
        self.rng = random.Random()
        self.burst_ids: list[str] = []
        self.trickle_ids: list[str] = []
        self.long_id: str | None = None
        self.delayed_id: str | None = None
        self.cancel_outcome: CancelOutcome | None = None
        self.cancelled = threading.Event()

    def _client(self) -> PortQueue:
        pq = PortQueue(self.dsn, schema=self.schema, application_name="portqueue-demo")
        retry = {"max_attempts": 3, "delay_seconds": 1,
                 "backoff": {"strategy": "exponential", "factor": 2}}
        pq.create_queue(queue=WORK_QUEUE, handler=work, concurrency=WORK_CONCURRENCY,
                        retry=retry, dead_letter_queue=DEAD_QUEUE)
        pq.create_queue(queue=LONG_QUEUE, handler=long_job, concurrency=1)
        pq.on("job_cancelled", self._on_cancelled)
        return pq

    def _on_cancelled(self, job: JobSnapshot) -> None:
        self.console.print(
            f"[yellow]event job_cancelled:[/] the long job stopped at "
            f"{(job.progress or 0):.0%} (output {job.output})")
        self.cancelled.set()

    def run(self) -> Summary:
        started = time.monotonic()
        with self._client() as pq, self._progress() as progress:
            bar = progress.add_task("starting the worker", total=self.plan.total)
            long_bar = progress.add_task("long job's progress (to be cancelled)", total=100,
                                         visible=False)
            pq.start(poll_interval=POLL_INTERVAL, grace_seconds=5)
            try:
                self._burst(pq, progress, bar)
                self._trickle(pq, progress, bar, long_bar)
                progress.update(bar, description="retries, the delayed job, the cancel")
                self._wait_finished(pq, progress, bar, long_bar)
            except BaseException:
                # Interrupted or stuck: set every signal and put unfinished jobs back.
                pq.stop(abort=True)
                raise
            progress.update(bar, description="stopping the worker")
            pq.stop()
            progress.update(bar, description="done")
            return self._summary(pq, time.monotonic() - started)

    def _progress(self) -> Progress:
        return Progress(
            TextColumn("{task.description:<38}"), BarColumn(), MofNCompleteColumn(),
            TaskProgressColumn(), TimeElapsedColumn(), console=self.console)

    def _burst(self, pq: PortQueue, progress: Progress, bar: TaskID) -> None:
        progress.update(bar, description=f"{self.plan.burst} jobs added in one statement")
        results = pq.add_jobs(queue=WORK_QUEUE, jobs=[
            {"data": {"kind": "ok", "n": n}} for n in range(self.plan.burst)])
        self.burst_ids = [r.job_id for r in results if r.job_id is not None]
        self._wait(pq, progress, bar, until=lambda done: done >= self.plan.burst)

    def _trickle(self, pq: PortQueue, progress: Progress, bar: TaskID, long_bar: TaskID) -> None:
        plan = self.plan
        progress.update(bar, description="jobs added one by one")
        long_id = added_job_id(pq.add_job(queue=LONG_QUEUE, data={"kind": "long"}))
        self.long_id = long_id
        progress.update(long_bar, visible=True)
        self.delayed_id = pq.add_job(queue=WORK_QUEUE, data={"kind": "delayed", "n": -1},
                                     schedule={"start_after_seconds": DELAY_SECONDS}).job_id
        kinds = ["ok"] * plan.trickle + ["flaky"] * plan.flaky + ["broken"] * plan.broken
        self.rng.shuffle(kinds)
        for n, kind in enumerate(kinds, start=plan.burst):
            result = pq.add_job(queue=WORK_QUEUE, data={"kind": kind, "n": n})
            if kind == "ok" and result.job_id is not None:
                self.trickle_ids.append(result.job_id)
            time.sleep(TRICKLE_PAUSE)
            if n % 10 == 0:
                self._refresh(pq, progress, bar, long_bar)
        self._cancel_long_job(pq, long_id, progress, bar, long_bar)

    def _cancel_long_job(self, pq: PortQueue, long_id: str, progress: Progress, bar: TaskID,
                         long_bar: TaskID) -> None:
        deadline = time.monotonic() + 10
        # Cancel it while it runs: wait for its claim (it is claimed at once).
        while time.monotonic() < deadline:
            job = pq.get_job(job_id=long_id)
            if job is None or job.status is not JobStatus.PENDING:
                break
            self._refresh(pq, progress, bar, long_bar)
            time.sleep(0.05)
        self.cancel_outcome = pq.cancel_job(job_id=long_id).outcome
        self.console.print(f"cancel_job on the running long job: {self.cancel_outcome.name}")

    def _finished(self, pq: PortQueue) -> int:
        finished = 0
        for queue in (WORK_QUEUE, LONG_QUEUE):
            counts = pq.get_queue_stats(queue=queue).counts
            finished += sum(n for status, n in counts.items() if status.finished)
        return finished

    def _refresh(self, pq: PortQueue, progress: Progress, bar: TaskID,
                 long_bar: TaskID | None = None) -> int:
        finished = self._finished(pq)
        progress.update(bar, completed=finished)
        if long_bar is not None and self.long_id is not None:
            job = pq.get_job(job_id=self.long_id)
            if job is not None:
                progress.update(long_bar, completed=round((job.progress or 0) * 100))
        return finished

    def _wait(self, pq: PortQueue, progress: Progress, bar: TaskID, *, until: Callable[[int], bool],
              long_bar: TaskID | None = None) -> None:
        timeout = FINISH_TIMEOUT + self.plan.total / 500
        deadline = time.monotonic() + timeout
        while not until(self._refresh(pq, progress, bar, long_bar)):
            if time.monotonic() > deadline:
                raise DemoError(f"jobs did not finish within {timeout:.0f} s")
            time.sleep(0.05)

    def _wait_finished(self, pq: PortQueue, progress: Progress, bar: TaskID,
                       long_bar: TaskID) -> None:
        self._wait(pq, progress, bar, long_bar=long_bar,
                   until=lambda done: done >= self.plan.total)
        # The event is emitted after the write; let its line print before the table.
        self.cancelled.wait(2)

    def _summary(self, pq: PortQueue, wall_seconds: float) -> Summary:
        counts = {queue: pq.get_queue_stats(queue=queue).counts
                  for queue in (WORK_QUEUE, LONG_QUEUE, DEAD_QUEUE)}
        q = queries_for(self.schema)
        with psycopg.connect(self.dsn, autocommit=True,
                             application_name="portqueue:demo") as conn:
            (throughput,) = execute_sync(conn, ops.throughput(q, job_ids=self.burst_ids))
            (latency,) = execute_sync(conn, ops.latency(q, job_ids=self.trickle_ids))
        long_job_row = pq.get_job(job_id=self.long_id) if self.long_id else None
        delayed = pq.get_job(job_id=self.delayed_id) if self.delayed_id else None
        delayed_wait = None
        if delayed is not None and delayed.started_at is not None:
            delayed_wait = (delayed.started_at - delayed.start_after).total_seconds()
        return Summary(
            plan=self.plan, counts=counts,
            throughput_jobs=throughput["jobs"], throughput_seconds=throughput["seconds"] or 0.0,
            latency_jobs=latency["jobs"], p50_seconds=latency["p50_seconds"],
            p99_seconds=latency["p99_seconds"], cancel_outcome=self.cancel_outcome,
            long_progress=long_job_row.progress if long_job_row else None,
            delayed_wait_seconds=delayed_wait,
            wall_seconds=wall_seconds)


def print_summary(console: Console, summary: Summary, where: str) -> None:
    statuses = list(JobStatus)
    table = Table(title=f"portqueue demo: {summary.plan.total} jobs ({where})",
                  title_justify="left")
    table.add_column("queue")
    for status in statuses:
        table.add_column(status.value, justify="right")
    for queue, counts in summary.counts.items():
        table.add_row(queue, *[str(counts.get(status, 0)) for status in statuses])
    console.print(table)

    plan = summary.plan
    rate = (summary.throughput_jobs / summary.throughput_seconds
            if summary.throughput_seconds > 0 else float("nan"))
    metrics = Table(show_header=False, box=None, padding=(0, 2, 0, 0))
    metrics.add_column(style="bold")
    metrics.add_column()
    metrics.add_row("throughput", f"{rate:,.0f} jobs/s ({summary.throughput_jobs} jobs added in "
                    f"one statement, {summary.throughput_seconds:.2f} s from add to last finish)")
    metrics.add_row("commit-to-start", f"p50 {_ms(summary.p50_seconds)}, "
                    f"p99 {_ms(summary.p99_seconds)} ({summary.latency_jobs} jobs added one "
                    "by one to an idle worker; started_at - start_after)")
    metrics.add_row("retries", f"{plan.flaky} jobs failed once and completed on attempt 2; "
                    f"{plan.broken} failed 3 attempts and were copied to {DEAD_QUEUE!r} "
                    "(on purpose: logged at INFO, not as errors)")
    metrics.add_row("delayed", f"1 job added with start_after_seconds={DELAY_SECONDS}, started "
                    f"{_ms(summary.delayed_wait_seconds)} after it was due (no NOTIFY for "
                    f"a job not yet due: the {POLL_INTERVAL} s poll finds it)")
    cancel = summary.cancel_outcome.name if summary.cancel_outcome else "not sent"
    progress = "" if summary.long_progress is None else f" at {summary.long_progress:.0%}"
    metrics.add_row("cancelled", f"1 long job, while running (cancel_job: {cancel}){progress}")
    metrics.add_row("wall time", f"{summary.wall_seconds:.1f} s (worker start to stop)")
    console.print(metrics)


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1000:.1f} ms"


def summary_line(summary: Summary) -> str:
    """One line for scripts and tests: the outcome and the counts."""
    work = summary.counts[WORK_QUEUE]
    return (
        f"portqueue demo: {summary.plan.total} jobs: "
        f"{work.get(JobStatus.COMPLETED, 0)} completed, {work.get(JobStatus.FAILED, 0)} failed, "
        f"{summary.counts[LONG_QUEUE].get(JobStatus.CANCELLED, 0)} cancelled, "
        f"{summary.counts[DEAD_QUEUE].get(JobStatus.PENDING, 0)} dead-lettered; "
        f"{summary.wall_seconds:.1f} s")


def run_demo(*, dsn: str, schema: str, jobs: int, console: Console, where: str) -> Summary:
    """Run the demo on ``dsn`` in a fresh ``schema``; the summary (already printed)."""
    plan = Plan.for_jobs(jobs)
    with fresh_schema(dsn, schema) as version:
        where = f"{where}, PostgreSQL {version}"
        one_by_one = plan.trickle + plan.flaky + plan.broken
        console.print(f"{where}: schema {schema!r} migrated. {plan.total} jobs: "
                      f"{plan.burst} in a burst, {one_by_one} one by one "
                      f"({plan.flaky} flaky, {plan.broken} broken), 1 delayed, 1 long")
        summary = Demo(dsn, schema, plan, console).run()
    print_summary(console, summary, where)
    return summary


class DeliberateFailures(logging.Filter):
    """Lets the worker's records of the demo's own failures through only as INFO.

    A job failing every attempt is logged as an ERROR: right for an
    application, but in the demo it is the plan, and six red records read as a
    crash. The summary's "retries" row tells that part of the story; records
    naming any other exception type pass unchanged, so a real error still shows.
    """

    MARK = f": {DemoFailure.__module__}.{DemoFailure.__qualname__}: "

    def __init__(self, level: int) -> None:
        super().__init__()
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno <= logging.INFO or self.MARK not in record.getMessage():
            return True
        if self.level > logging.INFO:
            return False
        record.levelno, record.levelname = logging.INFO, logging.getLevelName(logging.INFO)
        return True


def demo_logging(console: Console, level: str) -> None:
    """Worker logs through the demo's console, above the progress bars."""
    handler = RichHandler(console=console, show_time=False, show_path=False, markup=False)
    logger = logging.getLogger("portqueue")
    logger.setLevel(level.upper())
    handler.addFilter(DeliberateFailures(logger.level))
    logger.handlers[:] = [handler]
    logger.propagate = False
