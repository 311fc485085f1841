"""Turning a handler's return or exception into the write that settles the attempt."""

from __future__ import annotations

import logging
import traceback
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import psycopg

from portqueue import validation
from portqueue import worker_operations as ops
from portqueue.control import Cancel, Snooze
from portqueue.worker.backoff import retry_delay
from portqueue.worker.state import Running

log = logging.getLogger("portqueue.worker")

MAX_TRACEBACK_CHARS = 16_000


@dataclass(frozen=True)
class Completion:
    running: Running
    status: str  # "completed", or "cancelled" when it returned after a cancel signal
    output_json: str

    def as_json(self) -> str:
        claimed = self.running.claimed
        return ops.completion_entry(claimed.id, claimed.lease_token, status=self.status,
                                    output_json=self.output_json, **_last_report(self.running))


@dataclass(frozen=True)
class Failure:
    running: Running
    status: str  # "failed", or "cancelled" when it raised after a cancel signal
    retry: bool
    delay_seconds: float
    error: dict[str, Any]

    def as_json(self) -> str:
        claimed = self.running.claimed
        return ops.failure_entry(claimed.id, claimed.lease_token, status=self.status,
                                 retry=self.retry, delay_seconds=self.delay_seconds,
                                 error=self.error, **_last_report(self.running))


def _last_report(running: Running) -> dict[str, Any]:
    """Progress and attrs not known to be written: the settling write carries
    them, so a job that finishes before the next heartbeat (or while one is
    waiting to be written) still records them."""
    progress, attrs = running.report.last()
    return {"progress": progress, "attrs": attrs}


@dataclass(frozen=True)
class Settled:
    """The handler's transaction already wrote the outcome (or was fenced out)."""

    running: Running
    completed: bool
    status: str = "completed"  # as written: "cancelled" if it returned after its cancel


@dataclass(frozen=True)
class Unsure:
    """The handler's transaction sent COMMIT and lost its connection before the
    reply: the completion may or may not have committed. The completer reads
    the row (fenced by the lease token) to learn which, so a commit that landed
    is neither run again nor reported as a lost lease."""

    running: Running
    completion: Completion
    error: BaseException


@dataclass(frozen=True)
class Snoozed:
    """The handler raised ``Snooze``: back to pending ``seconds`` later, its
    attempt given back and no error recorded."""

    running: Running
    seconds: float

    def as_json(self) -> str:
        claimed = self.running.claimed
        return ops.snooze_entry(claimed.id, claimed.lease_token, delay_seconds=self.seconds,
                                **_last_report(self.running))


Outcome = Completion | Failure | Settled | Unsure | Snoozed


def unsettled(running: Running, completing: Completion, exc: BaseException,
              committing: bool) -> Failure | Unsure:
    """The outcome of a transactional completion that raised: unknown when the
    connection broke during COMMIT, else a plain failure (nothing committed)."""
    if committing and isinstance(exc, psycopg.OperationalError):
        return Unsure(running, completing, exc)
    return failure(running, exc)


def _clean(text: str) -> str:
    # jsonb stores neither NUL nor lone surrogates; an error message may hold both.
    return text.replace("\x00", "\\0").encode("utf-8", "replace").decode("utf-8")


def error_record(exc: BaseException, attempt: int) -> dict[str, Any]:
    kind = type(exc)
    name = kind.__qualname__
    if kind.__module__ != "builtins":
        name = f"{kind.__module__}.{name}"
    trace = "".join(traceback.format_exception(kind, exc, exc.__traceback__))
    return {
        "attempt": attempt,
        "type": _clean(name),
        "message": _clean(str(exc)),
        "traceback": _clean(trace[-MAX_TRACEBACK_CHARS:]),
    }


def completion(running: Running, result: Any, max_output_bytes: int) -> Outcome:
    try:
        # Most handlers return nothing: skip encoding and checking None.
        output = "null" if result is None else validation.payload(
            "output", result, max_output_bytes)
    except ValueError as exc:
        return failure(running, exc)
    cancelled = running.state.reason == "cancelled"
    return Completion(running, "cancelled" if cancelled else "completed", output)


def unreadable(running: Running, exc: BaseException) -> Failure:
    """The outcome of a job whose row could not be made into a ``Job`` (its
    data nested too deep to decode, written by SQL): failed, never retried,
    since every attempt would read the same row; the handler never ran."""
    return Failure(running=running, status="failed", retry=False, delay_seconds=0.0,
                   error=error_record(exc, running.claimed.attempt))


def raised(running: Running, exc: BaseException) -> Failure | Snoozed:
    """The outcome of a handler that raised: a snooze, unless its cancel was
    requested meanwhile (the cancel wins), else a failure."""
    if isinstance(exc, Snooze) and running.state.reason != "cancelled":
        return Snoozed(running, exc.seconds)
    return failure(running, exc)


def failure(running: Running, exc: BaseException) -> Failure:
    claimed = running.claimed
    # Cancel from the handler ends the job as a cancel request would: no retry.
    cancelled = running.state.reason == "cancelled" or isinstance(exc, Cancel)
    retry = (
        not cancelled
        and claimed.attempt < claimed.max_attempts
        and not isinstance(exc, running.spec.dont_autoretry_for)
    )
    return Failure(
        running=running,
        status="cancelled" if cancelled else "failed",
        retry=retry,
        delay_seconds=retry_delay(claimed.retry, claimed.attempt) if retry else 0.0,
        error=error_record(exc, claimed.attempt),
    )


def event_of(outcome: Outcome) -> str:
    """The event a written outcome emits (its finished job's), said in the log."""
    claimed = outcome.running.claimed
    if isinstance(outcome, Failure) and outcome.status == "cancelled":
        log.info("job %s on %r cancelled (raised %s after its cancel signal)", claimed.id,
                 claimed.queue, outcome.error["type"])
        return "job_cancelled"
    if isinstance(outcome, Failure):
        level = logging.WARNING if outcome.retry else logging.ERROR
        log.log(level, "job %s on %r failed (attempt %d/%d%s): %s: %s", claimed.id,
                claimed.queue, claimed.attempt, claimed.max_attempts,
                ", will retry" if outcome.retry else "", outcome.error["type"],
                outcome.error["message"])
        return "job_retrying" if outcome.retry else "job_failed"
    if isinstance(outcome, Completion | Settled) and outcome.status == "cancelled":
        # A job.transaction() handler that returned after its cancel
        # signal wrote status 'cancelled' too.
        return "job_cancelled"
    return "job_completed"


# What each event counts as in drain's result.
KINDS = {"job_completed": "completed", "job_failed": "failed", "job_retrying": "retried",
         "job_cancelled": "cancelled"}


def slot_freeing_counts(outcomes: Iterable[Outcome]) -> Counter[str]:
    """How many slots of each queue these outcomes free once written."""
    return Counter(outcome.running.claimed.queue for outcome in outcomes
                   if isinstance(outcome, Completion | Failure | Snoozed))


def slot_freeing_queues(outcomes: Iterable[Outcome]) -> set[str]:
    """The queues whose slots these outcomes free once written (a ``Settled``
    one freed its slot when its own transaction committed)."""
    return {outcome.running.claimed.queue for outcome in outcomes
            if isinstance(outcome, Completion | Failure | Snoozed)}
