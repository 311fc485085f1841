"""``portqueue add``: one job (or a recurring schedule), or a JSON-lines file of jobs."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Annotated, Any

import typer

from portqueue.cli.base import EXIT_USAGE, DsnOption, JsonOption, SchemaOption, app, fail
from portqueue.cli.options import json_value
from portqueue.cli.output import Bar, bars_wanted, emit_json, progress_bar, when
from portqueue.cli.session import Session, open_session
from portqueue.errors import InvalidArgument
from portqueue.types import AddJobResult, BackoffStrategy

# add_jobs entries per statement for --file: big enough to amortise the round
# trip, small enough that one statement's parameters stay modest.
DEFAULT_BATCH_SIZE = 1000

# The client's argument names as this command spells them, for bad-input messages.
OPTION_NAMES = {
    "queue": "QUEUE", "data": "DATA", "priority": "--priority",
    "schedule": "--delay/--every/--cron", "schedule.start_after_seconds": "--delay",
    "schedule.start_every_seconds": "--every", "schedule.cron": "--cron",
    "schedule.cron.pattern": "--cron", "schedule.cron.tz": "--tz",
    "retry": "--max-attempts/--retry-delay/--backoff",
    "retry.max_attempts": "--max-attempts", "retry.delay_seconds": "--retry-delay",
    "retry.backoff": "--backoff", "expire_in_seconds": "--expire-in",
    "timeout_seconds": "--timeout", "retention": "--retention-ttl",
    "retention.ttl_seconds": "--retention-ttl",
    "retention.completed_ttl_seconds": "--retention-completed-ttl",
    "retention.failed_ttl_seconds": "--retention-failed-ttl",
    "idempotency_key": "--idempotency-key", "singleton_key": "--singleton-key",
    "group_id": "--group-id", "preferred_instance_key_pattern": "--preferred-instance-key-pattern",
    "instance_key": "--instance-key",
}
_ENTRY_RE = re.compile(r"jobs\[(\d+)\]\.?")


@app.command("add")
def add_command(
    queue: Annotated[str | None, typer.Argument(
        help="The queue (or --queue); it must exist unless --create-queue.",
        show_default=False)] = None,
    data: Annotated[str | None, typer.Argument(
        help="The job's data as JSON (default {}).", show_default=False)] = None,
    queue_option: Annotated[str | None, typer.Option(
        "--queue", help="The queue, as an option: then the only argument is DATA.",
        show_default=False)] = None,
    create_queue: Annotated[bool, typer.Option(
        "--create-queue", help="Create the queue if it does not exist (by default an "
        "unknown queue, such as a typo, is refused).")] = False,
    file: Annotated[str | None, typer.Option(
        "--file", help="Add one job per line of this JSON-lines file ('-' for stdin): each "
        "line an object of add_job options, e.g. {\"data\": {...}, \"priority\": 5}. All "
        "or nothing: one transaction.", show_default=False)] = None,
    priority: Annotated[int | None, typer.Option(
        "--priority", help="Higher is claimed first (default 0).", show_default=False)] = None,
    delay: Annotated[int | None, typer.Option(
        "--delay", help="Start after this many seconds.", show_default=False)] = None,
    every: Annotated[int | None, typer.Option(
        "--every", help="Recurring: a job every N seconds (stores a schedule).",
        show_default=False)] = None,
    cron: Annotated[str | None, typer.Option(
        "--cron", help="Recurring: a cron pattern, e.g. '0 8 * * 1-5' (stores a schedule).",
        show_default=False)] = None,
    tz: Annotated[str | None, typer.Option(
        "--tz", help="The IANA time zone of --cron (default UTC).", show_default=False)] = None,
    max_attempts: Annotated[int | None, typer.Option(
        "--max-attempts", help="Attempts in all, the first included.",
        show_default=False)] = None,
    retry_delay: Annotated[int | None, typer.Option(
        "--retry-delay", help="Seconds before a retry.", show_default=False)] = None,
    backoff: Annotated[BackoffStrategy | None, typer.Option(
        "--backoff", help="How the retry delay grows.", show_default=False)] = None,
    expire_in: Annotated[int | None, typer.Option(
        "--expire-in", help="Expire the job if not started within N seconds.",
        show_default=False)] = None,
    timeout: Annotated[int | None, typer.Option(
        "--timeout", help="Fail an attempt running longer than N seconds.",
        show_default=False)] = None,
    retention_ttl: Annotated[int | None, typer.Option(
        "--retention-ttl", help="Keep the finished job N seconds.", show_default=False)] = None,
    retention_completed_ttl: Annotated[int | None, typer.Option(
        "--retention-completed-ttl", help="Keep the job N seconds if it completes.",
        show_default=False)] = None,
    retention_failed_ttl: Annotated[int | None, typer.Option(
        "--retention-failed-ttl",
        help="Keep the job N seconds if it fails, is cancelled or expires.",
        show_default=False)] = None,
    idempotency_key: Annotated[str | None, typer.Option(
        "--idempotency-key", help="First writer wins, forever.", show_default=False)] = None,
    singleton_key: Annotated[str | None, typer.Option(
        "--singleton-key", help="One pending or active job per key.",
        show_default=False)] = None,
    group_id: Annotated[str | None, typer.Option(
        "--group-id", help="The job's group.", show_default=False)] = None,
    pattern: Annotated[str | None, typer.Option(
        "--preferred-instance-key-pattern", help="A regex over workers' instance keys; "
        "needs --instance-key.", show_default=False)] = None,
    instance_key: Annotated[str | None, typer.Option(
        "--instance-key", envvar="PORTQUEUE_INSTANCE_KEY",
        help="This producer's instance key.", show_default=False)] = None,
    batch_size: Annotated[int, typer.Option(
        "--batch-size", min=1, max=10_000, help="With --file: jobs per statement.")]
    = DEFAULT_BATCH_SIZE,
    dsn: DsnOption = None,
    schema: SchemaOption = "portqueue",
    as_json: JsonOption = False,
) -> None:
    """Add a job, a recurring schedule, or every job of a JSON-lines file.

    Options apply to the job; with --file they are the defaults of every line
    (a line's own keys win). The queue must exist (a worker declared it, or
    something was added to it) unless --create-queue is given: exit 2
    otherwise, nothing written. Exits 1 if the queue is paused with mode all.

    Examples:

        portqueue add emails '{"to": "a@example.com"}' --priority 10

        portqueue add reports '{}' --cron '0 8 * * 1-5' --tz Europe/Paris

        portqueue add --queue emails --file jobs.jsonl

        portqueue add new-queue '{}' --create-queue
    """
    queue, data = _queue_and_data(queue, data, queue_option)
    schedule = _schedule(delay, every, cron, tz)
    retry = _retry(max_attempts, retry_delay, backoff)
    given = {
        "schedule": schedule, "priority": priority, "retry": retry,
        "expire_in_seconds": expire_in, "timeout_seconds": timeout,
        "retention": _retention(retention_ttl, retention_completed_ttl, retention_failed_ttl),
        "idempotency_key": idempotency_key, "singleton_key": singleton_key,
        "group_id": group_id, "preferred_instance_key_pattern": pattern,
    }
    options = {key: value for key, value in given.items() if value is not None}
    if file is not None:
        if data is not None:
            fail(EXIT_USAGE, "DATA and --file: pass one of them")
        if every is not None or cron is not None:
            fail(EXIT_USAGE, "--every/--cron: a file adds one-off jobs; add a schedule alone")
        _add_file(queue, file, options, batch_size, dsn, schema, instance_key, as_json,
                  create_queue)
        return
    options["data"] = {} if data is None else json_value(data, "DATA")
    with open_session(dsn, schema, names=OPTION_NAMES, instance_key=instance_key) as session:
        _check_queue(session, queue, create_queue)
        result = session.run(session.pq.add_job, queue=queue, **options)
    if as_json:
        emit_json(result)
    else:
        typer.echo(_describe_add(result))


def _queue_and_data(queue: str | None, data: str | None,
                    queue_option: str | None) -> tuple[str, str | None]:
    """QUEUE [DATA], or --queue QUEUE [DATA]: with --queue, the one argument is DATA."""
    if queue_option is None:
        if queue is None:
            fail(EXIT_USAGE, "QUEUE: missing (the first argument, or --queue)")
        return queue, data
    if data is not None:
        fail(EXIT_USAGE, "--queue and a QUEUE argument: pass the queue once")
    return queue_option, queue


def _check_queue(session: Session, queue: str, create_queue: bool) -> None:
    """Refuse a queue that does not exist unless asked to create it: a typo
    would otherwise create a queue no worker consumes."""
    if create_queue or session.run(session.pq.get_queue, queue=queue) is not None:
        return
    fail(EXIT_USAGE, f"QUEUE: no queue {queue!r} (see `portqueue queues`); pass "
         "--create-queue to create it")


def _schedule(delay: int | None, every: int | None, cron: str | None,
              tz: str | None) -> dict[str, Any] | None:
    if tz is not None and cron is None:
        fail(EXIT_USAGE, "--tz: goes with --cron")
    # Several modes at once are passed on: the client names the conflict.
    schedule: dict[str, Any] = {}
    if delay is not None:
        schedule["start_after_seconds"] = delay
    if every is not None:
        schedule["start_every_seconds"] = every
    if cron is not None:
        schedule["cron"] = cron if tz is None else {"pattern": cron, "tz": tz}
    return schedule or None


def _retry(max_attempts: int | None, delay: int | None,
           backoff: BackoffStrategy | None) -> dict[str, Any] | None:
    retry: dict[str, Any] = {}
    if max_attempts is not None:
        retry["max_attempts"] = max_attempts
    if delay is not None:
        retry["delay_seconds"] = delay
    if backoff is not None:
        retry["backoff"] = {"strategy": backoff}
    return retry or None


def _describe_add(result: AddJobResult) -> str:
    if result.schedule_id is not None:
        return (f"scheduled {result.schedule_id} on {result.queue!r}: "
                f"next run at {when(result.next_run_at)}")
    status = result.status.value if result.status else "-"
    if result.deduplicated:
        reason = result.deduplication_reason.value if result.deduplication_reason else "-"
        return (f"not added: job {result.job_id} on {result.queue!r} already holds that "
                f"key ({reason}, {status})")
    return (f"added job {result.job_id} to {result.queue!r} "
            f"({status}, starts {when(result.start_after)})")


@contextmanager
def _lines(file: str) -> Iterator[IO[str]]:
    if file == "-":
        yield sys.stdin
        return
    try:
        handle = Path(file).open(encoding="utf-8")  # noqa: SIM115  (closed below)
    except OSError as exc:
        fail(EXIT_USAGE, f"--file: cannot read {file}: {exc.strerror}")
    with handle:
        yield handle


def _numbered(handle: IO[str]) -> Iterator[tuple[int, str]]:
    """The non-blank lines with their numbers (from 1)."""
    try:
        for number, line in enumerate(handle, start=1):
            if line.strip():
                yield number, line
    except UnicodeDecodeError as exc:  # decoded a block at a time: no line number to give
        fail(EXIT_USAGE, f"--file: not UTF-8 text ({exc.reason})")


def _count_lines(file: str) -> int | None:
    """The bar's total: non-blank lines of a regular file (stdin cannot be read twice)."""
    if file == "-":
        return None
    with _lines(file) as handle:
        return sum(1 for _ in _numbered(handle))


def _add_file(queue: str, file: str, defaults: dict[str, Any], batch_size: int,
              dsn: str | None, schema: str, instance_key: str | None, as_json: bool,
              create_queue: bool) -> None:
    total = _count_lines(file) if bars_wanted(as_json) else None
    with (_lines(file) as handle,
          open_session(dsn, schema, names=OPTION_NAMES, instance_key=instance_key) as session,
          progress_bar(f"adding to {queue}", enabled=bars_wanted(as_json)) as bar):
        _check_queue(session, queue, create_queue)
        bar.total(total)
        results = _add_batches(session, queue, handle, defaults, batch_size, bar)
    added = sum(1 for result in results if not result.deduplicated)
    if as_json:
        emit_json({"queue": queue, "lines": len(results), "added": added,
                   "deduplicated": len(results) - added,
                   "job_ids": [result.job_id for result in results]})
    else:
        typer.echo(f"added {added} job(s) to {queue!r} from {len(results)} line(s) "
                   f"({len(results) - added} deduplicated)")


def _add_batches(session: Session, queue: str, handle: IO[str], defaults: dict[str, Any],
                 batch_size: int, bar: Bar) -> list[AddJobResult]:
    """Every line, in batches of one statement each, all in one transaction: a bad
    line anywhere rolls back the lines before it."""
    results: list[AddJobResult] = []
    batch: list[dict[str, Any]] = []
    numbers: list[int] = []
    with session.transaction() as tx:
        for number, line in _numbered(handle):
            batch.append({**defaults, **_entry(line, number)})
            numbers.append(number)
            if len(batch) == batch_size:
                results += _add_batch(session, queue, batch, numbers, tx)
                bar.advance(len(batch))
                batch, numbers = [], []
        if batch:
            results += _add_batch(session, queue, batch, numbers, tx)
            bar.advance(len(batch))
    return results


def _entry(line: str, number: int) -> dict[str, Any]:
    entry = json_value(line, f"--file line {number}")
    if not isinstance(entry, dict):
        fail(EXIT_USAGE, f"--file line {number}: must be a JSON object of add_job options, "
             'e.g. {"data": {"to": "a@example.com"}}')
    return entry


def _add_batch(session: Session, queue: str, batch: list[dict[str, Any]], numbers: list[int],
               tx: object) -> list[AddJobResult]:
    try:
        return session.pq.add_jobs(queue=queue, jobs=batch, tx=tx)
    except InvalidArgument as exc:
        # "jobs[3].priority: …" names the batch entry; a person wants the file's line.
        match = _ENTRY_RE.match(exc.argument)
        if match is None:
            raise
        line = numbers[int(match.group(1))]
        inner = InvalidArgument(exc.argument[match.end():] or "entry",
                                str(exc)[len(exc.argument) + 2:])
        fail(EXIT_USAGE, f"--file line {line}: {inner}")


def _retention(ttl: int | None, completed: int | None,
               failed: int | None) -> dict[str, int] | None:
    """The add's retention from its three flags; None when none is given."""
    given = {"ttl_seconds": ttl, "completed_ttl_seconds": completed,
             "failed_ttl_seconds": failed}
    return {key: value for key, value in given.items() if value is not None} or None
