"""Every producing, managing and reading behaviour, once, without I/O.

Each operation is a generator: it yields ``Query`` objects, receives their rows,
and returns a result dataclass. ``portqueue.driver`` runs them on a pool
connection or on a caller's transaction, sync or async.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

from portqueue import parsing, validation
from portqueue.cron import next_match
from portqueue.driver import UNIQUE_VIOLATION, Operation, Rows, sqlstate
from portqueue.errors import (
    InvalidArgument,
    JobDeletedError,
    PortQueueError,
    QueueNotEmpty,
    QueuePausedError,
)
from portqueue.ids import uuid7, uuid7s
from portqueue.queries import Batch, Queries, Query
from portqueue.settings import Settings
from portqueue.types import (
    FINISHED_STATUSES,
    AddJobResult,
    Backoff,
    BackoffStrategy,
    CancelCounts,
    CancelOutcome,
    CancelResult,
    CronSpec,
    Debounce,
    DeduplicationReason,
    JobSnapshot,
    JobStatus,
    Page,
    PauseMode,
    QueueInfo,
    QueueStats,
    RateLimit,
    Retention,
    RetryPolicy,
    Schedule,
    ScheduleInfo,
    Throttle,
)
from portqueue.validation import JobSpec, QueueDefaults

# The handler declarations of a client, by queue (Registry.add_defaults).
Declared = Callable[[str], QueueDefaults | None]

# A skipped entry whose winner finished (singleton) or was removed between our
# INSERT and the look-up is tried again; more rounds than this means a storm of
# concurrent writers on one key, which is reported rather than looped on.
MAX_CONFLICT_ROUNDS = 5


# --- decoding: drivers differ (psycopg, psycopg2, Django) in what they return ---


def _id(value: Any) -> str:
    return str(value) if isinstance(value, uuid.UUID) else str(uuid.UUID(str(value)))


def _optional_id(value: Any) -> str | None:
    return None if value is None else _id(value)


def _json(value: Any, column: str) -> Any:
    # The read queries select JSON columns as text (psycopg would decode jsonb,
    # Django's backend would not), so text is always undecoded JSON here and a
    # JSON string payload such as "[1]" is never taken for a list.
    if isinstance(value, (str, bytes, bytearray)):
        return parsing.stored_json(column, value, parse_int=_stored_integer)
    return value


def _stored_integer(text: str) -> int | Decimal:
    # jsonb keeps integers of any length (written by SQL, or by a client with a
    # raised limit), but int() refuses more digits than the interpreter's
    # int/str limit: such a job would be unreadable. It reads as an exact Decimal.
    limit = sys.get_int_max_str_digits()
    if limit and len(text) - text.startswith("-") > limit:
        return Decimal(text)
    return int(text)


def _utc(value: datetime) -> datetime:
    return value.astimezone(timezone.utc)


class _UtcCache:
    """``_utc`` for many values that are mostly one: a batch's start_after."""

    def __init__(self) -> None:
        self._last: tuple[datetime, datetime] | None = None

    def __call__(self, value: datetime) -> datetime:
        if self._last is None or self._last[0] != value:
            self._last = (value, _utc(value))
        return self._last[1]


def _optional_utc(value: datetime | None) -> datetime | None:
    return None if value is None else _utc(value)


def retry_policy_of(row: dict[str, Any]) -> RetryPolicy | None:
    """A row's retry columns (job or queue) as a RetryPolicy; None when unset."""
    if row["max_attempts"] is None:
        return None
    return _retry_policy(row)


def _retry_policy(row: dict[str, Any]) -> RetryPolicy:
    # A job row's max_attempts is NOT NULL: its policy is always set. A queue
    # row's other retry columns may be NULL; they then mean RetryPolicy's own
    # defaults, the one place the built-in policy is written
    # (tests/unit/test_retry_defaults.py checks the SQL, schema and docs against it).
    built_in = RetryPolicy()

    def column(name: str, default: Any) -> Any:
        return default if row[name] is None else row[name]

    return RetryPolicy(
        max_attempts=row["max_attempts"],
        delay_seconds=column("retry_delay_seconds", built_in.delay_seconds),
        backoff=Backoff(
            strategy=BackoffStrategy(column("backoff_strategy", built_in.backoff.strategy)),
            factor=column("backoff_factor", built_in.backoff.factor),
            max_delay_seconds=row["backoff_max_delay_seconds"],
            jitter=column("backoff_jitter", built_in.backoff.jitter),
        ),
    )


def job_snapshot(row: dict[str, Any]) -> JobSnapshot:
    retry = _retry_policy(row)
    return JobSnapshot(
        job_id=_id(row["id"]),
        queue=row["queue"],
        status=JobStatus(row["status"]),
        data=_json(row["data"], "data"),
        priority=row["priority"],
        attempt=row["attempt"],
        max_attempts=row["max_attempts"],
        group_id=row["group_id"],
        idempotency_key=row["idempotency_key"],
        singleton_key=row["singleton_key"],
        preferred_instance_key_pattern=row["preferred_instance_key_pattern"],
        schedule_id=_optional_id(row["schedule_id"]),
        created_at=_utc(row["created_at"]),
        start_after=_utc(row["start_after"]),
        started_at=_optional_utc(row["started_at"]),
        finished_at=_optional_utc(row["finished_at"]),
        expire_at=_optional_utc(row["expire_at"]),
        retention_ttl_seconds=row["retention_ttl_seconds"],
        output=_json(row["output"], "output"),
        errors=_json(row["errors"], "errors"),
        progress=row["progress"],
        attrs=_json(row["attrs"], "attrs"),
        cancel_requested=row["cancel_requested_at"] is not None,
        source_job_id=_optional_id(row["source_job_id"]),
        retry=retry,
        timeout_seconds=row["timeout_seconds"],
        scheduled_for=_optional_utc(row["scheduled_for"]),
        retention_completed_ttl_seconds=row["retention_completed_ttl_seconds"],
        retention_failed_ttl_seconds=row["retention_failed_ttl_seconds"],
        # Readers without the workflow columns (an older query) get the defaults.
        depends_on=[_id(job_id) for job_id in row.get("depends_on") or ()],
        flow_id=_optional_id(row.get("flow_id")),
    )


def queue_info(row: dict[str, Any]) -> QueueInfo:
    return QueueInfo(
        queue=row["name"],
        paused=None if row["paused"] is None else PauseMode(row["paused"]),
        created_at=_utc(row["created_at"]),
        concurrency=row["concurrency"],
        retry=retry_policy_of(row),
        expire_in_seconds=row["expire_in_seconds"],
        retention=Retention(
            ttl_seconds=row["retention_ttl_seconds"],
            keep_completed=row["retention_keep_completed"],
            keep_failed=row["retention_keep_failed"],
            completed_ttl_seconds=row["retention_completed_ttl_seconds"],
            failed_ttl_seconds=row["retention_failed_ttl_seconds"],
        ),
        timeout_seconds=row["timeout_seconds"],
        lease_seconds=row["lease_seconds"],
        dead_letter_queue=row["dead_letter_queue"],
        global_concurrency=row["global_concurrency"],
        partition_concurrency=row["partition_concurrency"],
        rate_limit=None if row["rate_limit"] is None else RateLimit(
            limit=row["rate_limit"], period_seconds=row["rate_limit_period_seconds"],
            per_partition=bool(row["rate_limit_per_partition"])),
    )


def schedule_info(row: dict[str, Any]) -> ScheduleInfo:
    return ScheduleInfo(
        schedule_id=_id(row["id"]),
        queue=row["queue"],
        cron=row["cron"],
        tz=row["tz"],
        every_seconds=row["every_seconds"],
        next_run_at=_utc(row["next_run_at"]),
        last_run_at=_optional_utc(row["last_run_at"]),
        last_job_id=_optional_id(row["last_job_id"]),
        enabled=row["enabled"],
        data=_json(row["data"], "data"),
        idempotency_key=row["idempotency_key"],
        created_at=_utc(row["created_at"]),
        misfire_grace_seconds=row["misfire_grace_seconds"],
    )


def added_job_id(result: AddJobResult) -> str:
    """The job a one-off add created or found (a recurring add has none)."""
    if result.job_id is None:
        raise PortQueueError(f"the add named no job (a recurring add?): {result!r}")
    return result.job_id


def _added(job_id: Any, queue: str, row: dict[str, Any]) -> AddJobResult:
    return AddJobResult(
        job_id=_id(job_id),
        queue=queue,
        status=JobStatus(row["status"]),
        start_after=_utc(row["start_after"]),
        # Only the add statements' rows carry it (not retry_job's).
        created_at=_optional_utc(row.get("created_at")),
    )


# --- producing ---


# The columns add_jobs takes besides id and data, one array each.
_ENTRY_COLUMNS = (
    "priority", "start_after_seconds", "max_attempts", "retry_delay_seconds",
    "backoff_strategy", "backoff_factor", "backoff_max_delay_seconds", "backoff_jitter",
    "expire_in_seconds", "retention_ttl_seconds", "timeout_seconds",
    "preferred_instance_key_pattern", "idempotency_key", "singleton_key", "group_id", "attrs",
    "retention_completed_ttl_seconds", "retention_failed_ttl_seconds",
    "partition_key", "debounce_key",
)


def _entry_arrays(specs: Sequence[JobSpec]) -> dict[str, Any]:
    """add_jobs' parameters: one array per column, in entry order. A column no
    entry sets stays an empty array, which the statement pads with NULLs."""
    arrays: dict[str, list[Any]] = {column: [] for column in _ENTRY_COLUMNS}
    for index, spec in enumerate(specs):
        for column, value in spec.columns().items():
            array = arrays[column]
            if not array:
                array.extend([None] * len(specs))
            array[index] = value
    # Ids and data are sent as one text each rather than as lists, which the
    # driver would quote and escape element by element: the ids are canonical
    # UUIDs (nothing to quote in an array literal), the data validated JSON.
    return {"id": "{" + ",".join(spec.id for spec in specs) + "}",
            "data": "[" + ",".join(spec.data_json for spec in specs) + "]",
            **arrays}


def _scalar_entry(spec: JobSpec) -> dict[str, Any]:
    """One job's parameters for the scalar add statements (fragment scalar_entry)."""
    values = dict.fromkeys(_ENTRY_COLUMNS)
    values.update(spec.columns(), id=spec.id, data=spec.data_json)
    return values


def _add_statement(q: Queries, queue: str, specs: Sequence[JobSpec], *, keyed: bool) -> Query:
    """The statement adding ``specs``: scalars for one keyed job, arrays
    otherwise; ON CONFLICT only when some entry has an idempotency or
    singleton key. (A single keyless job reaching here is a queue's first add
    or a paused queue's refusal: add_job_to_open_queue took the others.)"""
    if len(specs) == 1 and keyed:
        return q("add_job", queue=queue, **_scalar_entry(specs[0]))
    arrays = _entry_arrays(specs)
    if keyed:
        return q("add_jobs", queue=queue, **arrays)
    return q("add_unkeyed_jobs", queue=queue, **arrays)


def add_jobs(q: Queries, queue: str, specs: Sequence[JobSpec]) -> Operation[list[AddJobResult]]:
    """Insert ``specs`` in one statement; a skipped entry returns its key's winner."""
    if any(s.throttle is not None or s.debounce is not None for s in specs):
        return (yield from _add_with_flow_keys(q, queue, specs))
    if not any(s.idempotency_key is not None or s.singleton_key is not None for s in specs):
        return (yield from _add_unkeyed_jobs(q, queue, specs))
    results: dict[int, AddJobResult] = {}
    todo = list(enumerate(specs))
    for _ in range(MAX_CONFLICT_ROUNDS):
        rows = yield _add_statement(q, queue, [spec for _, spec in todo], keyed=True)
        _refuse_if_paused(rows, queue)
        added = {row["id"]: row for row in rows}
        skipped = []
        utc, utc_created = _UtcCache(), _UtcCache()
        for index, spec in todo:
            row = added.get(spec.id)
            if row is not None:
                # Runs per job of a batch: spec.id is canonical already, and
                # the batch's rows share one start_after and created_at.
                results[index] = AddJobResult(
                    job_id=spec.id, queue=queue, status=JobStatus(row["status"]),
                    start_after=utc(row["start_after"]),
                    created_at=utc_created(row["created_at"]))
            else:
                skipped.append((index, spec))
        if not skipped:
            break
        owners = yield q(
            "find_conflicts",
            queue=queue,
            idempotency_keys=[s.idempotency_key for _, s in skipped if s.idempotency_key],
            singleton_keys=[s.singleton_key for _, s in skipped if s.singleton_key],
        )
        todo = []
        for index, spec in skipped:
            duplicate = _duplicate_of(spec, owners, queue)
            if duplicate is None:
                todo.append((index, spec))
            else:
                results[index] = duplicate
        if not todo:
            break
    else:
        raise PortQueueError(
            f"could not add {len(todo)} job(s) to {queue!r}: their keys kept changing owner"
        )
    return [results[index] for index in range(len(specs))]


# A pattern is accepted when PostgreSQL compiles it and matches the producer's
# key within this deadline: the local validator cannot size every automaton
# (one it passes made PostgreSQL spend seconds, then refuse it as "too
# complex"), and such a pattern, stored, would cost every worker meeting it.
# Workers judge stored patterns again, with a deadline of their own
# (portqueue.worker.patterns). The check's cost: docs/performance.md.
PATTERN_DEADLINE_MS = 100

# A pattern PostgreSQL refuses: invalid or too complex (2201B), over the
# deadline (57014, statement_timeout), over a memory or size limit.
PATTERN_REFUSALS = frozenset({"2201B", "57014", "53200", "54000", "54001"})


def check_patterns(
    q: Queries, instance_key: str | None, arguments: Mapping[str, str]
) -> Operation[None]:
    """Refuse the first pattern PostgreSQL does not compile and evaluate within
    PATTERN_DEADLINE_MS, naming its argument. ``arguments``: each distinct
    pattern and the argument of its first entry. Writes nothing; the caller's
    transaction stays usable."""
    patterns = list(arguments)
    try:
        yield _pattern_checks(q, instance_key, patterns)
    except Exception as error:
        if sqlstate(error) not in PATTERN_REFUSALS:
            raise
        yield _end_pattern_check(q)
        refused, reason = error, sqlstate(error)
        if len(patterns) > 1:
            # One pipeline checked them all: find which one was refused.
            for pattern in patterns:
                found = yield from _refusal(q, instance_key, pattern)
                if found is not None:
                    patterns, (refused, reason) = [pattern], (found, sqlstate(found))
                    break
        raise InvalidArgument(arguments[patterns[0]], _refusal_reason(refused, reason)) from None
    yield _end_pattern_check(q)


def _pattern_checks(q: Queries, instance_key: str | None, patterns: Sequence[str]) -> Batch:
    # A NULL key would make `~` return NULL without compiling the pattern.
    key = instance_key or ""
    return Batch(iter([
        q("begin_pattern_check"),
        q("pattern_check_deadline", milliseconds=str(PATTERN_DEADLINE_MS)),
        *(q("check_pattern", instance_key=key, pattern=pattern) for pattern in patterns),
    ]))


def _end_pattern_check(q: Queries) -> Batch:
    return Batch(iter([q("end_pattern_check"), q("release_pattern_check")]))


def _refusal(
    q: Queries, instance_key: str | None, pattern: str
) -> Operation[Exception | None]:
    """The error PostgreSQL refuses ``pattern`` with, or None."""
    try:
        yield _pattern_checks(q, instance_key, [pattern])
    except Exception as error:
        if sqlstate(error) not in PATTERN_REFUSALS:
            raise
        yield _end_pattern_check(q)
        return error
    yield _end_pattern_check(q)
    return None


def _refusal_reason(error: BaseException, state: str | None) -> str:
    if state == "57014":
        return (f"PostgreSQL did not compile and evaluate it within {PATTERN_DEADLINE_MS} ms; "
                "simplify its repetitions")
    # The server's own words ("regular expression is too complex"), through
    # SQLAlchemy's and Django's wrappers.
    seen: BaseException | None = error
    while seen is not None:
        message = getattr(getattr(seen, "diag", None), "message_primary", None)
        if message:
            return f"PostgreSQL refuses it: {message}"
        seen = getattr(seen, "orig", None) or seen.__cause__
    return "PostgreSQL refuses it"


def _patterns_of(specs: Sequence[JobSpec], prefix: str | None) -> dict[str, str]:
    """Each distinct pattern of ``specs`` and the argument of its first entry."""
    arguments: dict[str, str] = {}
    for index, spec in enumerate(specs):
        pattern = spec.preferred_instance_key_pattern
        if pattern is not None and pattern not in arguments:
            entry = "" if prefix is None else f"{prefix}[{index}]."
            arguments[pattern] = f"{entry}preferred_instance_key_pattern"
    return arguments


def _add_unkeyed_jobs(
    q: Queries, queue: str, specs: Sequence[JobSpec]
) -> Operation[list[AddJobResult]]:
    if len(specs) == 1:
        # The commonest add first: one job to a queue that exists and takes
        # adds. Nothing inserted means a new queue or a paused one, which the
        # full statement below deals with.
        (spec,) = specs
        rows = yield q("add_job_to_open_queue", queue=queue, **_scalar_entry(spec))
        if rows:
            return [AddJobResult(job_id=spec.id, queue=queue, status=JobStatus.PENDING,
                                 start_after=_utc(rows[0]["start_after"]),
                                 created_at=_utc(rows[0]["created_at"]))]
    rows = yield _add_statement(q, queue, specs, keyed=False)
    return _unkeyed_results(queue, specs, rows)


def _unkeyed_results(queue: str, specs: Sequence[JobSpec], rows: Rows) -> list[AddJobResult]:
    """The results of keyless adds from their statements' rows (one per statement)."""
    if any(row["paused"] for row in rows):
        raise QueuePausedError(queue)
    added = sum(row["added"] for row in rows)
    if added != len(specs):
        # Only a trigger of someone else's on the job table can skip a row here.
        raise PortQueueError(
            f"{len(specs)} job(s) sent to {queue!r} but {added} inserted: "
            "a BEFORE INSERT trigger on the job table must have dropped rows")
    # Each job starts at the statement's now() plus its delay, which is exact
    # arithmetic in Python as in Postgres (the interval is in seconds only).
    # Statements of one transaction share its now().
    now = _utc(rows[0]["now"])
    by_delay: dict[float, AddJobResult] = {}

    def result(spec: JobSpec) -> AddJobResult:
        template = by_delay.get(spec.start_after_seconds)
        if template is None:
            template = by_delay[spec.start_after_seconds] = AddJobResult(
                job_id=None, queue=queue, status=JobStatus.PENDING,
                start_after=now + timedelta(seconds=spec.start_after_seconds), created_at=now)
        return _with_job_id(template, spec.id)

    return [result(spec) for spec in specs]


def _with_job_id(template: AddJobResult, job_id: str) -> AddJobResult:
    # A frozen dataclass's __init__ sets each field through object.__setattr__;
    # copying a template's fields is cheaper (docs/performance.md), and this
    # runs for every job of a batch.
    added = object.__new__(AddJobResult)
    added.__dict__.update(template.__dict__, job_id=job_id)
    return added


def _refuse_if_paused(rows: Rows, queue: str) -> None:
    if any(row["outcome"] == "paused" for row in rows):
        raise QueuePausedError(queue)


def _duplicate_of(spec: JobSpec, owners: Rows, queue: str) -> AddJobResult | None:
    # Idempotency is checked first: it is the stronger, permanent identity.
    checks = (
        (DeduplicationReason.IDEMPOTENCY, "idempotency_key", spec.idempotency_key),
        (DeduplicationReason.SINGLETON, "singleton_key", spec.singleton_key),
    )
    for reason, column, key in checks:
        if key is None:
            continue
        for row in owners:
            live = reason is DeduplicationReason.IDEMPOTENCY or row["status"] in (
                "pending",
                "active",
            )
            if row[column] == key and live:
                result = _added(row["id"], queue, row)
                return AddJobResult(
                    job_id=result.job_id,
                    queue=queue,
                    status=result.status,
                    start_after=result.start_after,
                    deduplicated=True,
                    deduplication_reason=reason,
                    created_at=result.created_at,
                )
    return None


def next_run_at(schedule: Schedule, now: datetime) -> datetime:
    """The first tick strictly after ``now`` (the database clock)."""
    if schedule.start_every_seconds is not None:
        return _utc(now + timedelta(seconds=schedule.start_every_seconds))
    if not isinstance(schedule.cron, CronSpec):
        raise InvalidArgument("schedule", "needs start_every_seconds or a cron pattern")
    tick = next_match(schedule.cron.pattern, schedule.cron.tz, now)
    if tick is None:
        # The validator asked the host's clock; a year field's last tick can
        # pass before the database's, and nothing is written yet.
        raise InvalidArgument("schedule.cron.pattern", "has no tick after now")
    return tick


def add_schedule(
    q: Queries, queue: str, spec: JobSpec, schedule: Schedule
) -> Operation[AddJobResult]:
    """Store a recurring add; every option of ``spec`` but its data is the job template."""
    # The key dedups the schedule itself, and the delay is the schedule's.
    template = {column: value for column, value in spec.columns().items()
                if column not in ("idempotency_key", "start_after_seconds")}
    cron = schedule.cron if isinstance(schedule.cron, CronSpec) else None
    key = _schedule_key(spec, schedule)
    for _ in range(MAX_CONFLICT_ROUNDS):
        (clock,) = yield q("now")
        schedule_id = uuid7()
        values = {
            "id": schedule_id,
            "queue": queue,
            "cron": None if cron is None else cron.pattern,
            "tz": "UTC" if cron is None else cron.tz,
            "every_seconds": schedule.start_every_seconds,
            "next_run_at": next_run_at(schedule, clock["now"]),
            "data": spec.data_json,
            "job_options": json.dumps(template),
            "idempotency_key": key,
            "misfire_grace_seconds": schedule.misfire_grace_seconds,
        }
        # A named schedule is declared: the same name again updates it.
        rows = yield (q("add_schedule", **values) if schedule.key is None
                      else q("declare_schedule", **values))
        if any(row["outcome"] == "paused" for row in rows):
            raise QueuePausedError(queue)
        if rows:
            # A declaration that met its name updated that schedule in place.
            return _scheduled(queue, rows[0], deduplicated=_id(rows[0]["id"]) != schedule_id)
        existing = yield q(
            "find_schedule_by_key", queue=queue, idempotency_key=spec.idempotency_key
        )
        if existing:
            return _scheduled(queue, existing[0], deduplicated=True)
    raise PortQueueError(f"could not add a schedule to {queue!r}: its key kept changing owner")


def _delay_until(q: Queries, spec: JobSpec, start_at: datetime) -> Operation[JobSpec]:
    """``spec`` delayed to ``start_at`` (now, if it has passed) on the database
    clock: the add runs in the same transaction (the client makes an add with
    a schedule atomic), so now() is the same instant in both statements and
    the row's start_after is exactly ``start_at``."""
    (clock,) = yield q("now")
    delay = (start_at - clock["now"]).total_seconds()
    return spec._replace(start_after_seconds=max(delay, 0.0))


def _delay_batch_until(q: Queries, specs: list[JobSpec],
                       start_ats: Mapping[int, datetime]) -> Operation[list[JobSpec]]:
    """A batch's specs with each ``start_ats[index]`` as a delay, as ``_delay_until``
    does for one. Every delay becomes a float, so the batch's delay array has one
    element type."""
    (clock,) = yield q("now")
    now = clock["now"]
    return [spec._replace(start_after_seconds=max((start_ats[index] - now).total_seconds(), 0.0)
                          if index in start_ats else float(spec.start_after_seconds))
            for index, spec in enumerate(specs)]


def _schedule_key(spec: JobSpec, schedule: Schedule) -> str | None:
    """The schedule's key column: its name (``schedule.key``) or idempotency key,
    one identity in one unique index, so the two may not disagree."""
    if schedule.key is None:
        return spec.idempotency_key
    if spec.idempotency_key is not None and spec.idempotency_key != schedule.key:
        raise InvalidArgument("idempotency_key", "differs from schedule.key: a named "
                              "schedule is identified by its key alone")
    return schedule.key


def _scheduled(queue: str, row: dict[str, Any], *, deduplicated: bool = False) -> AddJobResult:
    return AddJobResult(
        job_id=None,
        queue=queue,
        status=None,
        start_after=None,
        deduplicated=deduplicated,
        deduplication_reason=DeduplicationReason.IDEMPOTENCY if deduplicated else None,
        schedule_id=_id(row["id"]),
        next_run_at=_utc(row["next_run_at"]),
    )


# --- managing ---


def retry_job(q: Queries, job_id: str) -> Operation[AddJobResult | None]:
    yield q("savepoint")
    try:
        rows = yield q("retry_job", job_id=job_id)
    except Exception as error:
        if sqlstate(error) != UNIQUE_VIOLATION:
            raise
        # A concurrent add took the singleton key: report it like any holder.
        yield q("rollback_to_savepoint")
        rows = []
    else:
        yield q("release_savepoint")
    if rows:
        return _added(rows[0]["id"], rows[0]["queue"], rows[0])
    blockers = yield q("retry_blocker", job_id=job_id)
    if not blockers:
        return None  # unknown, or active
    blocker = _added(blockers[0]["id"], blockers[0]["queue"], blockers[0])
    if blocker.job_id == job_id:
        return blocker  # pending already: nothing to re-arm
    return AddJobResult(
        job_id=blocker.job_id,
        queue=blocker.queue,
        status=blocker.status,
        start_after=blocker.start_after,
        deduplicated=True,
        deduplication_reason=DeduplicationReason.SINGLETON,
    )


def cancel_job(q: Queries, job_id: str) -> Operation[CancelResult]:
    rows = yield q("cancel_job", job_id=job_id, cancel_channel=q.cancel_channel)
    if not rows:
        outcome = CancelOutcome.NOT_FOUND
    elif rows[0]["cancelled"]:
        outcome = CancelOutcome.CANCELLED
    elif rows[0]["signalled"]:
        outcome = CancelOutcome.SIGNALLED
    else:
        outcome = CancelOutcome.ALREADY_FINISHED
    return CancelResult(job_id=job_id, outcome=outcome)


def remove_job(q: Queries, job_id: str) -> Operation[bool]:
    rows = yield q("remove_job", job_id=job_id)
    return bool(rows)


def remove_jobs_by_id(q: Queries, job_ids: list[str]) -> Operation[int]:
    if not job_ids:
        return 0
    rows = yield q("remove_jobs_by_id", job_ids=job_ids)
    return int(rows[0]["removed"])


def remove_jobs_by_status(q: Queries, queue: str, statuses: list[JobStatus]) -> Operation[int]:
    if not statuses:
        return 0
    rows = yield q("remove_jobs_by_status", queue=queue, statuses=[s.value for s in statuses])
    return int(rows[0]["removed"])


def remove_schedule(q: Queries, schedule_id: str) -> Operation[bool]:
    rows = yield q("remove_schedule", schedule_id=schedule_id)
    return bool(rows)


def remove_queue(q: Queries, queue: str) -> Operation[bool]:
    (row,) = yield q("remove_queue", queue=queue)
    if row["unfinished"]:
        raise QueueNotEmpty(queue, int(row["unfinished"]))
    return bool(row["removed"])


def pause_queue(q: Queries, queue: str, mode: PauseMode) -> Operation[QueueInfo]:
    rows = yield q("pause_queue", queue=queue, mode=mode.value)
    return queue_info(rows[0])


def resume_queue(q: Queries, queue: str) -> Operation[QueueInfo]:
    rows = yield q("resume_queue", queue=queue, job_channel=q.job_channel)
    return queue_info(rows[0])


def _retried(q: Queries, query: Query) -> Operation[int]:
    """Run a retry_jobs statement in a savepoint: a singleton key a concurrent
    add takes after the statement's check raises, and the statement is run
    again (it then passes over that job) rather than abort the transaction."""
    for _ in range(MAX_CONFLICT_ROUNDS):
        yield q("savepoint")
        try:
            (row,) = yield query
        except Exception as error:
            if sqlstate(error) != UNIQUE_VIOLATION:
                raise
            yield q("rollback_to_savepoint")
            continue
        yield q("release_savepoint")
        return int(row["retried"])
    raise PortQueueError("retry_jobs: the jobs' singleton keys kept being taken by new adds")


def retry_jobs_by_id(q: Queries, job_ids: list[str]) -> Operation[int]:
    if not job_ids:
        return 0
    return (yield from _retried(q, q("retry_jobs_by_id", job_ids=job_ids)))


def retry_jobs_by_status(q: Queries, queue: str, statuses: list[JobStatus]) -> Operation[int]:
    if not statuses:
        return 0
    return (yield from _retried(q, q("retry_jobs_by_status", queue=queue,
                                     statuses=[s.value for s in statuses])))


def _cancel_counts(rows: Rows, asked: int | None) -> tuple[CancelCounts, list[str]]:
    """A cancel_jobs statement's row: the counts, and the ids it cancelled.
    ``asked``: how many distinct ids were named (None: by status)."""
    (row,) = rows
    cancelled = [_id(job_id) for job_id in row["cancelled_ids"]]
    found = int(row["found"])
    return CancelCounts(
        cancelled=len(cancelled), signalled=int(row["signalled"]),
        already_finished=int(row["already_finished"]),
        not_found=0 if asked is None else asked - found,
    ), cancelled


def cancel_jobs_by_id(q: Queries, job_ids: list[str]) -> Operation[tuple[CancelCounts, list[str]]]:
    if not job_ids:
        return CancelCounts(), []
    distinct = list(dict.fromkeys(job_ids))
    rows = yield q("cancel_jobs_by_id", job_ids=distinct, cancel_channel=q.cancel_channel)
    return _cancel_counts(rows, len(distinct))


def cancel_jobs_by_status(
    q: Queries, queue: str, statuses: list[JobStatus]
) -> Operation[tuple[CancelCounts, list[str]]]:
    if not statuses:
        return CancelCounts(), []
    rows = yield q("cancel_jobs_by_status", queue=queue, statuses=[s.value for s in statuses],
                   cancel_channel=q.cancel_channel)
    return _cancel_counts(rows, None)


def redrive_jobs(
    settings: Settings, queue: str, limit: int | None, declared: Declared | None = None
) -> Operation[int]:
    """Add each waiting dead-letter copy of ``queue`` back to its source's queue
    as a new job (its data, priority and group; the rest from that queue's
    defaults, as any add), then complete the copies, their output naming the
    new jobs. The caller runs it in one transaction."""
    q = settings.queries
    copies = yield q("redrive_copies", queue=queue, limit=limit)
    if not copies:
        return 0
    by_queue: dict[str, list[tuple[str, JobSpec]]] = {}
    for row, job_id in zip(copies, uuid7s(len(copies)), strict=True):
        # The data goes back as stored, byte for byte: it was validated when added.
        spec = JobSpec(id=job_id, data_json=row["data"], priority=row["priority"],
                       group_id=row["group_id"])
        defaults = None if declared is None else declared(row["source_queue"])
        if defaults is not None:
            spec = defaults.fill(spec)
        by_queue.setdefault(row["source_queue"], []).append((row["id"], spec))
    redriven: list[dict[str, str | None]] = []
    for source_queue, entries in by_queue.items():
        added = yield from add_jobs(q, source_queue, [spec for _, spec in entries])
        redriven.extend({"id": copy_id, "job_id": result.job_id}
                        for (copy_id, _), result in zip(entries, added, strict=True))
    (row,) = yield q("complete_redriven", copies=json.dumps(redriven))
    return int(row["completed"])


# --- reading ---


def get_job(q: Queries, job_id: str) -> Operation[JobSnapshot | None]:
    rows = yield q("jobs_by_id", job_ids=[job_id])
    return job_snapshot(rows[0]) if rows else None


def get_jobs_by_id(q: Queries, job_ids: list[str]) -> Operation[list[JobSnapshot]]:
    rows = yield q("jobs_by_id", job_ids=job_ids)
    return [job_snapshot(row) for row in rows]


def finished_job(q: Queries, job_id: str) -> Operation[JobSnapshot | None]:
    """A waited-for job's snapshot if it is finished, None while it is not.

    Read when its finish was signalled (or at a poll), which the row may have
    moved on from: retried since (None, and the wait goes on for the next
    finish), or deleted since (``JobDeletedError``: nothing is left to read)."""
    snapshot = yield from get_job(q, job_id)
    if snapshot is None:
        raise JobDeletedError(job_id)
    return snapshot if snapshot.status.finished else None


def get_jobs(
    q: Queries,
    queue: str,
    statuses: list[JobStatus] | None,
    group_id: str | None,
    limit: int,
    offset: int,
) -> Operation[Page[JobSnapshot]]:
    filters = {
        "queue": queue,
        "statuses": None if statuses is None else [s.value for s in statuses],
        "group_id": group_id,
    }
    ids = yield q("job_page", limit=limit, offset=offset, **filters)
    (count,) = yield q("job_count", **filters)
    if not ids:
        return Page(items=[], total=int(count["total"]))
    rows = yield q("jobs_by_id", job_ids=[_id(row["id"]) for row in ids])
    return Page(items=[job_snapshot(row) for row in rows], total=int(count["total"]))


def get_queue_stats(q: Queries, queue: str) -> Operation[QueueStats]:
    (row,) = yield q("queue_stats", queue=queue)
    found = _json(row["counts"], "counts")
    return QueueStats(
        queue=queue,
        counts={status: int(found.get(status.value, 0)) for status in JobStatus},
        paused=None if row["paused"] is None else PauseMode(row["paused"]),
        oldest_pending_seconds=row["oldest_pending_seconds"],
    )


def get_queue(q: Queries, queue: str) -> Operation[QueueInfo | None]:
    rows = yield q("queue_by_name", queue=queue)
    return queue_info(rows[0]) if rows else None


def get_queues(q: Queries, limit: int, offset: int) -> Operation[Page[QueueInfo]]:
    rows = yield q("queue_page", limit=limit, offset=offset)
    (count,) = yield q("queue_count")
    return Page(items=[queue_info(row) for row in rows], total=int(count["total"]))


def get_schedules(
    q: Queries, queue: str | None, enabled: bool | None, limit: int, offset: int
) -> Operation[Page[ScheduleInfo]]:
    filters = {"queue": queue, "enabled": enabled}
    rows = yield q("schedule_page", limit=limit, offset=offset, **filters)
    (count,) = yield q("schedule_count", **filters)
    return Page(items=[schedule_info(row) for row in rows], total=int(count["total"]))


# --- entry points: validate the public arguments, then run the behaviour ---
# Validation happens when the client takes the first query, before it even
# borrows a connection, so bad input never reaches the database.


def add_job(
    settings: Settings, options: dict[str, Any], attrs: Mapping[str, str] | None = None,
    declared: Declared | None = None,
) -> Operation[AddJobResult]:
    """``attrs``: the add span's trace context, stored on a one-off job's row.
    ``declared``: the client's handler declarations, which fill what the job
    leaves unset (and the template of a recurring add)."""
    queue = validation.queue_name(options.pop("queue"))
    spec, schedule = validation.job_spec(
        options, instance_key=settings.instance_key, max_payload_bytes=settings.max_payload_bytes
    )
    defaults = None if declared is None else declared(queue)
    if defaults is not None:
        spec = defaults.fill(spec)
    if spec.preferred_instance_key_pattern is not None:
        yield from check_patterns(
            settings.queries, settings.instance_key, _patterns_of([spec], None))
    if schedule is not None and schedule.recurring:
        return (yield from add_schedule(settings.queries, queue, spec, schedule))
    if schedule is not None and schedule.start_at is not None:
        spec = yield from _delay_until(settings.queries, spec, schedule.start_at)
    if attrs:
        spec = spec._replace(attrs=attrs)
    (result,) = yield from add_jobs(settings.queries, queue, [spec])
    return result


# A batch of more entries than this, added on the client's own connection, is
# streamed: one INSERT per this many entries, in one transaction and one
# pipeline, each chunk validated and encoded while the server inserts the one
# before, so a large batch's two halves overlap (docs/performance.md).
# poll_only clients stream too: a pipeline is plain extended protocol, and the
# transaction keeps PgBouncer's server connection until it ends.
STREAM_CHUNK = 250


def add_job_batch(
    settings: Settings, queue: str, jobs: Sequence[Mapping[str, Any]],
    attrs: Mapping[str, str] | None = None, *, streamed: bool = False,
    declared: Declared | None = None,
) -> Operation[list[AddJobResult]]:
    """``streamed``: the batch runs in a transaction of the client's own, which
    rolls back if a later chunk's entry turns out bad. In a caller's ``tx=``
    every entry is validated before the one statement is sent. ``declared``
    as for ``add_job``."""
    queue = validation.queue_name(queue)
    entries = validation.job_entries(jobs)
    defaults = None if declared is None else declared(queue)
    if streamed and len(entries) > STREAM_CHUNK and not any(map(_needs_whole_batch, entries)):
        return (yield from _add_streamed_unkeyed_jobs(settings, queue, entries, attrs, defaults))
    ids = uuid7s(len(entries))
    specs = [_batch_spec(settings, index, entry, attrs, ids[index], defaults)
             for index, entry in enumerate(entries)]
    if not specs:
        return []
    start_ats = {index: at for index, entry in enumerate(entries)
                 if (at := _start_at_of(entry)) is not None}
    if start_ats:
        specs = yield from _delay_batch_until(settings.queries, specs, start_ats)
    patterns = _patterns_of(specs, "jobs")
    if patterns:
        yield from check_patterns(settings.queries, settings.instance_key, patterns)
    return (yield from add_jobs(settings.queries, queue, specs))


def _needs_whole_batch(entry: Mapping[str, Any]) -> bool:
    # Keys are resolved over the whole batch, and patterns are checked by
    # PostgreSQL before anything is inserted: neither can be streamed.
    # A start_at is turned into a delay on the batch's one now() (a round trip
    # a streamed chunk has no room for).
    return (entry.get("idempotency_key") is not None or entry.get("singleton_key") is not None
            or entry.get("preferred_instance_key_pattern") is not None
            or _start_at_of(entry) is not None
            or entry.get("throttle") is not None or entry.get("debounce") is not None)


def _start_at_of(entry: Mapping[str, Any]) -> datetime | None:
    """An entry's ``schedule.start_at`` (validated by ``_batch_spec``), if it has one."""
    schedule = entry.get("schedule")
    if schedule is None:
        return None
    value = schedule.get("start_at") if isinstance(schedule, Mapping) else getattr(
        schedule, "start_at", None)
    return value if isinstance(value, datetime) else None


def _batch_spec(
    settings: Settings, index: int, entry: Mapping[str, Any], attrs: Mapping[str, str] | None,
    job_id: str, defaults: QueueDefaults | None = None,
) -> JobSpec:
    prefix = f"jobs[{index}]."
    # tx is batch_tx's, already checked
    options = {k: v for k, v in entry.items() if k != "tx"} if "tx" in entry else entry
    spec, schedule = validation.job_spec(
        options,
        instance_key=settings.instance_key,
        max_payload_bytes=settings.max_payload_bytes,
        prefix=prefix,
        job_id=job_id,
    )
    if schedule is not None and schedule.recurring:
        # Each recurrence needs its own add_job call to return its schedule_id.
        raise InvalidArgument(f"{prefix}schedule", "add_jobs takes one-off jobs only")
    if defaults is not None:
        spec = defaults.fill(spec)
    return spec._replace(attrs=attrs) if attrs else spec


def _add_streamed_unkeyed_jobs(
    settings: Settings, queue: str, entries: Sequence[Mapping[str, Any]],
    attrs: Mapping[str, str] | None, defaults: QueueDefaults | None,
) -> Operation[list[AddJobResult]]:
    specs: list[JobSpec] = []

    def chunks() -> Iterator[Query]:
        for start in range(0, len(entries), STREAM_CHUNK):
            end = min(start + STREAM_CHUNK, len(entries))
            ids = uuid7s(end - start)
            chunk = [_batch_spec(settings, index, entries[index], attrs, ids[index - start],
                                 defaults)
                     for index in range(start, end)]
            specs.extend(chunk)
            yield _add_statement(settings.queries, queue, chunk, keyed=False)

    rows = yield Batch(chunks())
    return _unkeyed_results(queue, specs, rows)


def retry(settings: Settings, job_id: object) -> Operation[AddJobResult | None]:
    return (yield from retry_job(settings.queries, validation.job_id(job_id)))


def cancel(settings: Settings, job_id: object) -> Operation[CancelResult]:
    return (yield from cancel_job(settings.queries, validation.job_id(job_id)))


def remove(settings: Settings, job_id: object) -> Operation[bool]:
    return (yield from remove_job(settings.queries, validation.job_id(job_id)))


def remove_many(
    settings: Settings, job_ids: object, queue: object, statuses: object
) -> Operation[int]:
    if (job_ids is None) == (queue is None):
        raise InvalidArgument("job_ids", "pass either job_ids, or queue with statuses")
    if job_ids is not None:
        if statuses is not None:
            raise InvalidArgument("statuses", "goes with queue, not with job_ids")
        return (yield from remove_jobs_by_id(settings.queries, validation.job_ids(job_ids)))
    checked = validation.statuses(statuses, allow_active=False)
    if checked is None:
        raise InvalidArgument("statuses", "is required with queue")
    return (
        yield from remove_jobs_by_status(settings.queries, validation.queue_name(queue), checked)
    )


def _bulk_target(
    job_ids: object, queue: object, statuses: object, allowed: frozenset[JobStatus], verb: str
) -> list[str] | tuple[str, list[JobStatus]]:
    """retry_jobs' and cancel_jobs' selection: ids (any queue), or a queue and
    statuses, each status one the action applies to."""
    if (job_ids is None) == (queue is None):
        raise InvalidArgument("job_ids", "pass either job_ids, or queue with statuses")
    if job_ids is not None:
        if statuses is not None:
            raise InvalidArgument("statuses", "goes with queue, not with job_ids")
        return validation.job_ids(job_ids)
    checked = validation.statuses(statuses)
    if checked is None:
        raise InvalidArgument("statuses", "is required with queue")
    refused = [s.value for s in checked if s not in allowed]
    if refused:
        names = ", ".join(s.value for s in JobStatus if s in allowed)
        raise InvalidArgument("statuses", f"{verb} applies to {names} jobs, not {refused}")
    return validation.queue_name(queue), checked


CANCELLABLE_STATUSES = frozenset({JobStatus.PENDING, JobStatus.WAITING, JobStatus.ACTIVE})


def retry_many(settings: Settings, job_ids: object, queue: object,
               statuses: object) -> Operation[int]:
    # Never pending (queued already) nor active (clearing its lease would let a
    # second worker run it while the first still does).
    target = _bulk_target(job_ids, queue, statuses, FINISHED_STATUSES, "retry_jobs")
    if isinstance(target, list):
        return (yield from retry_jobs_by_id(settings.queries, target))
    return (yield from retry_jobs_by_status(settings.queries, *target))


def cancel_many(settings: Settings, job_ids: object, queue: object,
                statuses: object) -> Operation[tuple[CancelCounts, list[str]]]:
    target = _bulk_target(job_ids, queue, statuses, CANCELLABLE_STATUSES, "cancel_jobs")
    if isinstance(target, list):
        return (yield from cancel_jobs_by_id(settings.queries, target))
    return (yield from cancel_jobs_by_status(settings.queries, *target))


def redrive(settings: Settings, queue: object, limit: object,
            declared: Declared | None = None) -> Operation[int]:
    checked = None if limit is None else validation.integer("limit", limit, minimum=1)
    return (yield from redrive_jobs(settings, validation.queue_name(queue), checked, declared))


def read_jobs_by_id(settings: Settings, job_ids: object) -> Operation[list[JobSnapshot]]:
    return (yield from get_jobs_by_id(settings.queries, validation.job_ids(job_ids)))


def unschedule(settings: Settings, schedule_id: object) -> Operation[bool]:
    return (
        yield from remove_schedule(settings.queries, validation.job_id(schedule_id, "schedule_id"))
    )


def pause(settings: Settings, queue: object, mode: object) -> Operation[QueueInfo]:
    return (
        yield from pause_queue(
            settings.queries, validation.queue_name(queue), validation.pause_mode(mode)
        )
    )


def drop_queue(settings: Settings, queue: object) -> Operation[bool]:
    return (yield from remove_queue(settings.queries, validation.queue_name(queue)))


def resume(settings: Settings, queue: object) -> Operation[QueueInfo]:
    return (yield from resume_queue(settings.queries, validation.queue_name(queue)))


def read_job(settings: Settings, job_id: object) -> Operation[JobSnapshot | None]:
    return (yield from get_job(settings.queries, validation.job_id(job_id)))


def read_jobs(
    settings: Settings,
    queue: object,
    statuses: object,
    group_id: object,
    limit: object,
    offset: object,
) -> Operation[Page[JobSnapshot]]:
    window = validation.window(limit, offset)
    return (
        yield from get_jobs(
            settings.queries,
            validation.queue_name(queue),
            validation.statuses(statuses),
            validation.optional_text("group_id", group_id),
            *window,
        )
    )


def read_queue_stats(settings: Settings, queue: object) -> Operation[QueueStats]:
    return (yield from get_queue_stats(settings.queries, validation.queue_name(queue)))


def read_queue(settings: Settings, queue: object) -> Operation[QueueInfo | None]:
    return (yield from get_queue(settings.queries, validation.queue_name(queue)))


def read_queues(settings: Settings, limit: object, offset: object) -> Operation[Page[QueueInfo]]:
    return (yield from get_queues(settings.queries, *validation.window(limit, offset)))


def read_schedules(
    settings: Settings, queue: object, enabled: object, limit: object, offset: object
) -> Operation[Page[ScheduleInfo]]:
    window = validation.window(limit, offset)
    if enabled is not None and not isinstance(enabled, bool):
        raise InvalidArgument("enabled", "must be a bool or None")
    checked_queue = None if queue is None else validation.queue_name(queue)
    return (yield from get_schedules(settings.queries, checked_queue, enabled, *window))


# --- flow control (SPEC §8) ---


def _add_with_flow_keys(
    q: Queries, queue: str, specs: Sequence[JobSpec]
) -> Operation[list[AddJobResult]]:
    """A batch with throttled or debounced entries: those one statement each
    (each decides alone whether it creates a job), the rest as one batch, all
    in the caller's transaction; results in entry order."""
    results: dict[int, AddJobResult] = {}
    plain = [(index, spec) for index, spec in enumerate(specs)
             if spec.throttle is None and spec.debounce is None]
    if plain:
        added = yield from add_jobs(q, queue, [spec for _, spec in plain])
        results.update((index, result) for (index, _), result in zip(plain, added, strict=True))
    for index, spec in enumerate(specs):
        if spec.throttle is not None:
            results[index] = yield from _add_throttled(q, queue, spec, spec.throttle)
        elif spec.debounce is not None:
            results[index] = yield from _add_debounced(q, queue, spec, spec.debounce)
    return [results[index] for index in range(len(specs))]


def _add_throttled(q: Queries, queue: str, spec: JobSpec,
                   throttle: Throttle) -> Operation[AddJobResult]:
    rows = yield q("add_throttled_job", queue=queue, throttle_key=throttle.key,
                   throttle_seconds=throttle.seconds, **_scalar_entry(spec))
    _refuse_if_paused(rows, queue)
    if rows:
        return _added(rows[0]["id"], queue, rows[0])
    found = yield q("find_throttled", queue=queue, throttle_key=throttle.key)
    if not found:
        # Only a hand-written DELETE of the window's row gets here.
        raise PortQueueError(f"throttle key {throttle.key!r} of {queue!r} has no window")
    row = found[0]
    return AddJobResult(
        job_id=_id(row["id"]), queue=queue,
        status=None if row["status"] is None else JobStatus(row["status"]),
        start_after=_optional_utc(row["start_after"]), deduplicated=True,
        deduplication_reason=DeduplicationReason.THROTTLE,
        created_at=_optional_utc(row["created_at"]))


def _add_debounced(q: Queries, queue: str, spec: JobSpec,
                   debounce: Debounce) -> Operation[AddJobResult]:
    rows = yield q("add_debounced_job", queue=queue,
                   debounce_max_wait_seconds=debounce.max_wait_seconds,
                   **_scalar_entry(spec))
    _refuse_if_paused(rows, queue)
    result = _added(rows[0]["id"], queue, rows[0])
    if result.job_id == spec.id:
        return result
    return AddJobResult(
        job_id=result.job_id, queue=queue, status=result.status,
        start_after=result.start_after, deduplicated=True,
        deduplication_reason=DeduplicationReason.DEBOUNCE, created_at=result.created_at)


# The set_queue_limits arguments a caller did not name: their limits stay.
class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


def set_queue_limits(
    q: Queries, queue: str, *, global_concurrency: int | _Unset | None = UNSET,
    partition_concurrency: int | _Unset | None = UNSET,
    rate_limit: RateLimit | _Unset | None = UNSET,
) -> Operation[QueueInfo]:
    """Write the named limits (``None`` removes one); the others keep their value."""
    rows = yield set_queue_limits_query(
        q, queue, global_concurrency=global_concurrency,
        partition_concurrency=partition_concurrency, rate_limit=rate_limit)
    return queue_info(rows[0])


def set_queue_limits_query(
    q: Queries, queue: str, *, global_concurrency: int | _Unset | None = UNSET,
    partition_concurrency: int | _Unset | None = UNSET,
    rate_limit: RateLimit | _Unset | None = UNSET,
) -> Query:
    """The statement of ``set_queue_limits``, also what a worker's start runs."""
    return q(
        "set_queue_limits", queue=queue,
        global_concurrency=None if isinstance(global_concurrency, _Unset)
        else global_concurrency,
        partition_concurrency=None if isinstance(partition_concurrency, _Unset)
        else partition_concurrency,
        **validation.rate_limit_columns(None if isinstance(rate_limit, _Unset) else rate_limit),
        set_global_concurrency=not isinstance(global_concurrency, _Unset),
        set_partition_concurrency=not isinstance(partition_concurrency, _Unset),
        set_rate_limit=not isinstance(rate_limit, _Unset))


def set_limits(settings: Settings, queue: object, global_concurrency: object,
               partition_concurrency: object, rate_limit: object) -> Operation[QueueInfo]:
    """``set_queue_limits``'s arguments checked; ``UNSET`` ones are left alone."""
    name = validation.queue_name(queue)
    checked: dict[str, Any] = {}
    for argument, value in (("global_concurrency", global_concurrency),
                            ("partition_concurrency", partition_concurrency)):
        if not isinstance(value, _Unset):
            checked[argument] = validation.limit(argument, value)
    if not isinstance(rate_limit, _Unset):
        checked["rate_limit"] = validation.rate_limit(rate_limit)
    return (yield from set_queue_limits(settings.queries, name, **checked))
