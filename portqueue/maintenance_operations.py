"""Every statement the background services run, once, without I/O: the
maintenance half of the consumer's database contract, beside
``portqueue.worker_operations`` (claim, complete, heartbeat) and the
producer's ``portqueue.operations``.

Each function takes typed parameters (a wrong name or type fails mypy, and
``tests/unit/test_maintenance_operations.py`` fails on a parameter its query
does not name) and returns the ``Query`` to run; where rows need decoding, a
function beside it does that. The services (``portqueue.maintenance``), the
scheduler and the demo name no query and build no JSON themselves.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from portqueue.driver import Rows
from portqueue.queries import Queries, Query
from portqueue.types import FOREVER, Retention

# --- every service's transaction ---


def try_lock(q: Queries, *, key: int) -> Query:
    """The service's transaction-scoped advisory lock, without waiting."""
    return q("try_maintenance_lock", key=key)


def lock_acquired(rows: Rows) -> bool:
    return bool(rows[0]["acquired"])


def lead(q: Queries, *, role: str, worker_id: str, seconds: float) -> Query:
    """Take or renew ``role`` for ``seconds`` unless another worker holds it."""
    return q("lead_maintenance", role=role, worker_id=worker_id, seconds=seconds)


def leadership(rows: Rows) -> tuple[bool, float]:
    """Whether this worker leads, and the seconds until the current term ends."""
    return bool(rows[0]["leads"]), float(rows[0]["seconds_left"] or 0.0)


def resign(q: Queries, *, worker_id: str) -> Query:
    """Give up every role this worker leads."""
    return q("resign_maintenance", worker_id=worker_id)


def set_statement_timeout(q: Queries, *, milliseconds: int) -> Query:
    """For the rest of the transaction only."""
    return q("set_statement_timeout", milliseconds=str(milliseconds))


def disable_jit(q: Queries) -> Query:
    """For the rest of the transaction only (the pruner's statements)."""
    return q("disable_jit")


# --- rescue, expire, reap ---


def rescue_lapsed(q: Queries, *, limit: int) -> Query:
    """Up to ``limit`` jobs whose lease lapsed, back to pending (or failed,
    attempts spent); its rows name each job's ``id`` and ``queue``."""
    return q("rescue_lapsed", limit=limit)


def rescued(rows: Rows) -> tuple[list[str], list[str]]:
    """The rescued jobs' ids and their queues, in row order."""
    return [str(row["id"]) for row in rows], [str(row["queue"]) for row in rows]


def expire_pending(q: Queries, *, limit: int) -> Query:
    """Up to ``limit`` pending jobs past their ``expire_at``, expired."""
    return q("expire_pending", limit=limit)


def reap_workers(q: Queries, *, limit: int, min_silence_seconds: float,
                 default_lease_seconds: int) -> Query:
    """Up to ``limit`` worker rows silent for ten heartbeats and at least
    ``min_silence_seconds``; ``default_lease_seconds`` stands for a queue
    row that names no lease."""
    return q("reap_workers", limit=limit, min_seconds=min_silence_seconds,
             default_lease_seconds=default_lease_seconds)


def prune_throttle_windows(q: Queries, *, limit: int) -> Query:
    """Up to ``limit`` ended throttle windows, deleted (oldest first)."""
    return q("prune_throttle_windows", limit=limit)


# --- prune ---


@dataclass(frozen=True, slots=True)
class PruneWork:
    """One rule and range ``prune_work`` found work for."""

    rule: str
    queue: str | None
    status: str | None
    ttl: int | None
    keep: int | None


@dataclass(frozen=True, slots=True)
class PruneBatch:
    """What one prune batch did, and where the next one starts."""

    deleted: int
    candidates: int
    last_finished_at: datetime | None
    last_id: str | None


def prune_work(q: Queries, *, default_retention_seconds: int,
               default_retention: Retention) -> Query:
    """The rules and ranges with jobs past retention, given the client's defaults."""
    return q("prune_work", default_ttl_seconds=default_retention_seconds,
             default_completed_ttl_seconds=default_retention.completed_ttl_seconds,
             default_failed_ttl_seconds=default_retention.failed_ttl_seconds,
             default_keep_completed=default_retention.keep_completed,
             default_keep_failed=default_retention.keep_failed, forever=FOREVER)


def prune_work_items(rows: Rows) -> list[PruneWork]:
    return [PruneWork(rule=row["rule"], queue=row.get("queue"), status=row.get("status"),
                      ttl=row.get("ttl"), keep=row.get("keep")) for row in rows]


def prune_batch(q: Queries, work: PruneWork, *, limit: int, waited_grace_seconds: float,
                after: PruneBatch | None) -> Query:
    """The statement deleting the next batch of ``work``, after the last row
    the batch ``after`` looked at (None: from the start)."""
    shared: dict[str, Any] = {
        "limit": limit, "waited_grace_seconds": waited_grace_seconds,
        "after_finished_at": None if after is None else after.last_finished_at,
        "after_id": None if after is None else after.last_id}
    if work.rule == "own_ttl":
        return q("prune_by_own_ttl", ttl=work.ttl, **shared)
    if work.rule == "own_completed_ttl":
        return q("prune_by_own_completed_ttl", ttl=work.ttl, **shared)
    if work.rule == "own_failed_ttl":
        return q("prune_by_own_failed_ttl", ttl=work.ttl, **shared)
    if work.rule == "queue_ttl":
        return q("prune_by_queue_ttl", queue=work.queue, status=work.status, ttl=work.ttl,
                 **shared)
    return q("prune_by_count", queue=work.queue, status=work.status, keep=work.keep,
             forever=FOREVER, **shared)


def pruned(rows: Rows) -> PruneBatch:
    (row,) = rows
    last_id = row["last_id"]
    return PruneBatch(deleted=int(row["deleted"]), candidates=int(row["candidates"]),
                      last_finished_at=row["last_finished_at"],
                      last_id=None if last_id is None else str(last_id))


# --- the scheduler's ticks ---


@dataclass(frozen=True, slots=True)
class Tick:
    """One locked schedule's tick to spawn (or, with ``spawn`` False, only to
    pass), and the tick after it (None: the last, and the schedule is disabled)."""

    schedule_id: str
    job_id: str
    scheduled_for: datetime
    next_run_at: datetime | None
    spawn: bool


def lock_due_schedules(q: Queries, *, limit: int, passed_over: Collection[str]) -> Query:
    """Up to ``limit`` due schedules, locked ``FOR UPDATE SKIP LOCKED``, except
    those this process passes over."""
    return q("lock_due_schedules", limit=limit, passed_over=sorted(passed_over))


def spawn_scheduled_jobs(q: Queries, ticks: Sequence[Tick]) -> Query:
    """Each tick's job, and its schedule advanced, in one statement."""
    return q("spawn_scheduled_jobs", ticks=json.dumps([{
        "schedule_id": tick.schedule_id, "job_id": tick.job_id,
        "scheduled_for": tick.scheduled_for.isoformat(),
        "next_run_at": None if tick.next_run_at is None else tick.next_run_at.isoformat(),
        "spawn": tick.spawn,
    } for tick in ticks]))


def schedule_due_in(q: Queries, *, passed_over: Collection[str]) -> Query:
    """Seconds until the earliest schedule this process can advance is due
    (``seconds_until_due``; 0 or less: now)."""
    return q("schedule_due_in", passed_over=sorted(passed_over))


def next_schedule_due(q: Queries) -> Query:
    return q("next_schedule_due")


def seconds_until_due(rows: Rows) -> float | None:
    """Seconds until the earliest enabled schedule is due (None: there is none)."""
    seconds = rows[0]["seconds"]
    return None if seconds is None else float(seconds)
