"""Pull consumers (``fetch_jobs``, ``complete_job``, ``fail_job``,
``extend_lease``): the worker's claim and its fenced writes, driven by a
client for code that runs jobs outside portqueue's worker.

Nothing here is a second claim or a second completion: each operation builds
the worker's own statements (``portqueue.worker_operations``), so a pulled
job is claimed as a worker claims it (attempt counted, pause honoured,
``preferred_instance_key_pattern`` judged for the client's instance key, and
whatever else the claim enforces), its writes are fenced by its lease token,
and a lapsed lease is rescued like any other.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from portqueue import parsing, validation
from portqueue import worker_operations as ops
from portqueue.control import Cancel, Snooze
from portqueue.driver import Operation, Rows, sqlstate
from portqueue.errors import InvalidArgument
from portqueue.operations import PATTERN_REFUSALS, retry_policy_of
from portqueue.queries import Batch, Queries
from portqueue.settings import Settings
from portqueue.types import FetchedJob
from portqueue.worker.backoff import retry_delay
from portqueue.worker.outcomes import error_record
from portqueue.worker.patterns import JUDGE_DEADLINE_MS, UNJUDGED, PatternVerdicts

# The most jobs one fetch_jobs call claims: a worker's largest concurrency.
MAX_FETCH = 10_000
MAX_LEASE_SECONDS = 24 * 3600
# Claims in one fetch: a claim whose slots went to expired jobs or to
# patterns not judged yet is followed by another for what is left, a few
# times at most, so one call never loops on a backlog of such rows.
MAX_CLAIM_ROUNDS = 4
# A lease token is a bigint that only grows.
MAX_LEASE_TOKEN = 2**63 - 1
# The recorded type of an error fail_job was given as text.
TEXT_ERROR_TYPE = "fail_job"
_TIMED_OUT = "57014"


class ClientVerdicts:
    """A client's verdicts on the patterns its claims met, kept between
    ``fetch_jobs`` calls as a worker keeps its own, and shared by the threads
    (``PortQueue``) or tasks calling them: each access holds a lock for a few
    dictionary operations, never across a statement."""

    def __init__(self, instance_key: str | None) -> None:
        self._verdicts = PatternVerdicts(instance_key)
        self._lock = threading.Lock()
        self.instance_key = instance_key
        # The queues its claims found limited (SPEC §8), claimed the limited
        # way; rebuilt on a change, never mutated, so safe to hand out.
        self.limited: frozenset[str] = frozenset()

    def set_limited(self, queue: str, limited: bool) -> None:
        with self._lock:
            self.limited = (self.limited | {queue}) if limited else (self.limited - {queue})

    def claim_params(self) -> dict[str, list[str]]:
        # The lists are rebuilt on a change, never mutated: safe to hand out.
        with self._lock:
            return self._verdicts.claim_params()

    def to_judge(self, patterns: Sequence[str]) -> list[str]:
        with self._lock:
            return self._verdicts.to_judge(patterns)

    def remember(self, pattern: str, matches: bool, *, timed_out: bool = False) -> None:
        with self._lock:
            self._verdicts.remember(pattern, matches, timed_out=timed_out)


def _lease(job_id: object, lease_token: object) -> ops.Lease:
    return ops.Lease(validation.job_id(job_id),
                     validation.integer("lease_token", lease_token, minimum=1,
                                        maximum=MAX_LEASE_TOKEN))


def _lease_seconds(value: object) -> int:
    return validation.integer("lease_seconds", value, minimum=1, maximum=MAX_LEASE_SECONDS)


# --- fetch ---


def fetch(settings: Settings, verdicts: ClientVerdicts, consumer_id: str, queue: object,
          limit: object, lease_seconds: object) -> Operation[list[FetchedJob]]:
    """Claim up to ``limit`` jobs of ``queue``, leased for ``lease_seconds``.
    Runs in one transaction: the claims, the judging of patterns they met
    (in savepoints, so a refused pattern aborts nothing) and the read of the
    leases' expiry commit together."""
    name = validation.queue_name(queue)
    wanted = validation.integer("limit", limit, minimum=1, maximum=MAX_FETCH)
    seconds = _lease_seconds(lease_seconds)
    q = settings.queries
    claimed: list[dict[str, Any]] = []
    for _ in range(MAX_CLAIM_ROUNDS):
        slots = wanted - len(claimed)
        rows = yield from _claim(q, verdicts, consumer_id, name, slots, seconds)
        claimed.extend(row for row in rows if row["status"] == "active")
        if len(claimed) >= wanted:
            break
        patterns = [row["data_json"] for row in rows if row["status"] == UNJUDGED]
        if patterns:
            if not (yield from _judge(q, verdicts, patterns)):
                break  # nothing new judged: another claim would meet the same rows
        elif len(rows) < slots:
            break  # the queue has no more ready jobs
    if not claimed:
        return []
    data: dict[str, Any] = {}
    unreadable: list[str] = []
    for row in claimed:
        try:
            data[row["id"]] = parsing.stored_json("data", row["data_json"])
        except ValueError as exc:
            # Written by SQL too deep to decode: failed here, in the same
            # transaction, so the others are still handed out and this one
            # does not come back at every lapse of its lease.
            unreadable.append(ops.failure_entry(
                row["id"], row["lease_token"], status="failed", retry=False,
                delay_seconds=0.0, error=error_record(exc, row["attempt"])))
    if unreadable:
        yield ops.fail_jobs(q, unreadable)
        claimed = [row for row in claimed if row["id"] in data]
        if not claimed:
            return []
    leases = [ops.Lease(row["id"], row["lease_token"]) for row in claimed]
    leased = {row["id"]: row for row in (yield ops.leased_jobs(q, leases))}
    claimed.sort(key=lambda row: _claim_order(leased[row["id"]]))
    return [FetchedJob(
        job_id=row["id"], queue=row["queue"], data=data[row["id"]],
        attempt=row["attempt"], max_attempts=row["max_attempts"],
        lease_token=row["lease_token"],
        lease_expires_at=leased[row["id"]]["lease_expires_at"].astimezone(timezone.utc),
    ) for row in claimed]


def _claim(q: Queries, verdicts: ClientVerdicts, consumer_id: str, queue: str, slots: int,
           lease_seconds: int) -> Operation[Rows]:
    """One claim of ``queue``, as the worker claims it (``ops.claims``): the
    plain claim, or, for a queue the client knows to be limited, its lock and
    the limited claim. A claim that finds the queue's limits changed says so,
    and the client claims it the other way from then on (at once, for a
    queue the plain claim passed over): a fetch of a queue without limits
    runs no statement for them."""
    rows: Rows = []
    for _ in range(2):
        (transaction,) = ops.claims(
            q, slots={queue: slots}, lease_seconds={queue: lease_seconds},
            limited=verdicts.limited, worker_id=consumer_id,
            # claim, not claim_plain: a pull consumer keeps no state to learn
            # from claim_plain's MIXED between fetches.
            plain_only=False, **verdicts.claim_params())
        for query in transaction:
            rows = yield query
        statuses = {row["status"] for row in rows}
        if ops.UNLIMITED in statuses:
            verdicts.set_limited(queue, False)
        if ops.LIMITED not in statuses:
            break
        verdicts.set_limited(queue, True)
    return [row for row in rows if row["status"] not in (ops.LIMITED, ops.UNLIMITED)]


def _claim_order(row: Mapping[str, Any]) -> tuple[int, datetime, int]:
    """The order a claim takes ready jobs in (job_claim_idx)."""
    return -row["priority"], row["start_after"], row["seq"]


def _judge(q: Queries, verdicts: ClientVerdicts, patterns: Sequence[str]) -> Operation[bool]:
    """Judge the patterns a claim met for the client's key, as a worker judges
    them (``portqueue.worker.patterns``); True if any verdict was added."""
    judged = False
    for pattern in verdicts.to_judge(patterns):
        if verdicts.instance_key is None:
            verdicts.remember(pattern, False)  # what `NULL ~ pattern` would say
            judged = True
            continue
        refusal = None
        try:
            rows = yield Batch(iter([
                ops.begin_pattern_check(q),
                ops.pattern_check_deadline(q, milliseconds=JUDGE_DEADLINE_MS),
                ops.check_pattern(q, instance_key=verdicts.instance_key, pattern=pattern),
            ]))
        except Exception as error:
            refusal = sqlstate(error)
            if refusal not in PATTERN_REFUSALS:
                raise
            rows = []
        yield Batch(iter(ops.end_pattern_check(q)))
        verdicts.remember(pattern, ops.pattern_matches(rows),
                          timed_out=refusal == _TIMED_OUT)
        judged = True
    return judged


# --- the fenced writes ---


def complete(settings: Settings, job_id: object, lease_token: object,
             output: object) -> Operation[bool]:
    """The worker's fenced completion, for one job; False when fenced out."""
    lease = _lease(job_id, lease_token)
    output_json = "null" if output is None else validation.payload(
        "output", output, settings.max_payload_bytes)
    entry = ops.completion_entry(lease.id, lease.lease_token, status="completed",
                                 output_json=output_json)
    rows = yield ops.complete_jobs(settings.queries, [entry])
    return lease.id in ops.completed_ids(rows)


def fail(settings: Settings, job_id: object, lease_token: object, error: object,
         retry: object) -> Operation[bool]:
    """The worker's fenced failure, for one job; False when fenced out.

    With ``retry``, the job goes back to pending after its retry policy's
    delay while it has attempts left, as a raising handler's does; otherwise,
    or with no attempts left, it ends failed (and is copied to its queue's
    dead-letter queue, if one is set). A job whose cancel was requested ends
    cancelled, never retried, as a handler that raised after its cancel
    signal.

    ``error`` may be a ``Snooze`` or a ``Cancel``, as a handler raises them:
    a snoozed job goes back to pending ``seconds`` later with its attempt
    given back and no error; a cancelled one ends cancelled at once, its
    reason kept, whatever ``retry`` says."""
    lease = _lease(job_id, lease_token)
    if isinstance(error, str):
        if not error:
            raise InvalidArgument("error", "must say what went wrong")
    elif not isinstance(error, BaseException):
        raise InvalidArgument("error", f"must be a str or an exception, got {error!r}")
    if not isinstance(retry, bool):
        raise InvalidArgument("retry", f"must be a bool, got {retry!r}")
    q = settings.queries
    rows = yield ops.leased_jobs(q, [lease])
    if not rows:
        return False
    (row,) = rows
    if isinstance(error, Snooze) and not row["cancel_requested"]:
        entry = ops.snooze_entry(lease.id, lease.lease_token, delay_seconds=error.seconds)
        return lease.id in ops.snoozed_ids((yield ops.snooze_jobs(q, [entry])))
    cancelled = bool(row["cancel_requested"]) or isinstance(error, Cancel)
    attempt = row["attempt"]
    policy = retry_policy_of(row)
    again = retry and not cancelled and attempt < row["max_attempts"] and policy is not None
    record = (error_record(error, attempt) if isinstance(error, BaseException)
              else {**error_record(Exception(error), attempt), "type": TEXT_ERROR_TYPE,
                    "traceback": None})
    entry = ops.failure_entry(
        lease.id, lease.lease_token,
        status="cancelled" if cancelled else "failed", retry=again,
        delay_seconds=retry_delay(policy, attempt) if again and policy else 0.0, error=record)
    failed = yield ops.fail_jobs(q, [entry])
    return lease.id in ops.failed_ids(failed)


def extend(settings: Settings, job_id: object, lease_token: object,
           lease_seconds: object) -> Operation[bool]:
    """The heartbeat's fenced lease extension, for one job; False when fenced out."""
    lease = _lease(job_id, lease_token)
    touch = ops.Touch(lease, _lease_seconds(lease_seconds), None, None)
    rows = yield ops.touch_jobs(settings.queries, [touch])
    return lease.id in ops.touched(rows)
