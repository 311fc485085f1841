"""Every statement the worker runs, once, without I/O: the consumer's half of
the database contract, beside the producer's ``portqueue.operations``.

Each function takes typed parameters (a wrong name or type fails mypy, not
the database) and returns the ``Query`` to run; where the rows need decoding,
a ``*_rows`` function beside it does that. The worker's parts
(``portqueue.worker``) name no query and build no JSON themselves.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from portqueue import operations
from portqueue.driver import Rows
from portqueue.queries import Queries, Query


@dataclass(frozen=True, slots=True)
class Lease:
    """One attempt's fence: a write for it matches both, and status 'active'."""

    id: str
    lease_token: int


@dataclass(frozen=True, slots=True)
class Touch:
    """A heartbeat's entry: extend the lease; carry progress and attrs not yet written."""

    lease: Lease
    lease_seconds: int
    progress: float | None
    attrs: Mapping[str, Any] | None


def _leases(leases: Sequence[Lease]) -> str:
    return json.dumps([{"id": lease.id, "lease_token": lease.lease_token} for lease in leases])


# --- starting and stopping ---


def upsert_queue(q: Queries, queue_row: Mapping[str, Any]) -> Query:
    """A consumed queue's declared defaults (``QueueSpec.queue_row()``)."""
    return q("upsert_queue", **queue_row)


def register_worker(q: Queries, *, worker_id: str, instance_key: str | None, hostname: str,
                    pid: int, queues: Sequence[str], concurrency: int) -> Query:
    return q("register_worker", id=worker_id, instance_key=instance_key, hostname=hostname,
             pid=pid, queues=list(queues), concurrency=concurrency)


def unregister_worker(q: Queries, worker_id: str) -> Query:
    return q("unregister_worker", id=worker_id)


def release_jobs(q: Queries, leases: Sequence[Lease]) -> Query:
    """Unfinished attempts back to pending, attempts not spent (stop)."""
    return q("release_jobs", jobs=_leases(leases))


def end_sessions(q: Queries, pids: Sequence[int]) -> Query:
    return q("end_sessions", pids=list(pids))


# --- the claim loop ---


def claim(q: Queries, *, slots: Mapping[str, int], lease_seconds: Mapping[str, int],
          matching_patterns: Sequence[str], refused_patterns: Sequence[str],
          worker_id: str) -> Query:
    """Up to ``slots[queue]`` jobs of each queue, leased for ``lease_seconds[queue]``.
    Its rows are ``portqueue.worker.state.Claimed``, in column order. The
    patterns are this worker's verdicts (``portqueue.worker.patterns``): the
    claim evaluates none itself."""
    names = list(slots)
    return q("claim", queues=names, slots=[slots[name] for name in names],
             lease_seconds=[lease_seconds[name] for name in names],
             matching_patterns=list(matching_patterns),
             refused_patterns=list(refused_patterns), worker_id=worker_id)


def claim_plain(q: Queries, *, slots: Mapping[str, int], lease_seconds: Mapping[str, int],
                worker_id: str) -> Query:
    """``claim`` while no pending job names a pattern or has a partition key:
    the same rows, from a lighter statement. Claims nothing when such a job
    is pending, and says so with a ``MIXED`` row: claim with ``claim`` then."""
    names = list(slots)
    return q("claim_plain", queues=names, slots=[slots[name] for name in names],
             lease_seconds=[lease_seconds[name] for name in names], worker_id=worker_id)


# --- outcomes ---


def complete_jobs(q: Queries, completions_json: Sequence[str],
                  slots_freed_queues: Collection[str] = ()) -> Query:
    """Fenced completions, each entry already JSON (``Completion.as_json``):
    built once per job on the hot path, never decoded again. The freed slots
    of ``slots_freed_queues`` (limited queues) wake their workers once per
    queue, not once per job (see complete_jobs)."""
    return q("complete_jobs", jobs="[" + ",".join(completions_json) + "]",
             slots_freed_queues=sorted(slots_freed_queues), job_channel=q.job_channel)


def completed_ids(rows: Rows) -> set[str]:
    return {str(job_id) for job_id in rows[0]["ids"]} if rows else set()


def fail_jobs(q: Queries, failures_json: Sequence[str]) -> Query:
    """Fenced failures, each entry already JSON (``Failure.as_json``)."""
    return q("fail_jobs", jobs="[" + ",".join(failures_json) + "]")


def failed_ids(rows: Rows) -> set[str]:
    return {str(row["id"]) for row in rows}


def snooze_jobs(q: Queries, snoozes_json: Sequence[str]) -> Query:
    """Fenced snoozes, each entry already JSON (``Snoozed.as_json``)."""
    return q("snooze_jobs", jobs="[" + ",".join(snoozes_json) + "]")


def snoozed_ids(rows: Rows) -> set[str]:
    return {str(row["id"]) for row in rows}


def settled_by_lease(q: Queries, leases: Sequence[Lease]) -> Query:
    """The status of each job whose row still holds the lease token."""
    return q("settled_by_lease", jobs=_leases(leases))


def settled_statuses(rows: Rows) -> dict[str, str]:
    return {str(row["id"]): str(row["status"]) for row in rows}


# --- drain ---


def start_delayed_now(q: Queries, queues: Sequence[str]) -> Query:
    """Delayed and retrying jobs of ``queues`` ready at once (drain with_scheduled)."""
    return q("start_delayed_now", queues=list(queues))


# --- the heartbeat ---


def touch_jobs(q: Queries, touches: Sequence[Touch]) -> Query:
    return q("touch_jobs", jobs=json.dumps([{
        "id": touch.lease.id, "lease_token": touch.lease.lease_token,
        "lease_seconds": touch.lease_seconds, "progress": touch.progress,
        "attrs": touch.attrs,
    } for touch in touches]))


def touched(rows: Rows) -> dict[str, bool]:
    """Job id -> cancel requested, for each lease still held."""
    return {str(row["id"]): bool(row["cancel_requested"]) for row in rows}


def leased_jobs(q: Queries, leases: Sequence[Lease]) -> Query:
    """Each job still holding its lease: expiry, attempt and retry policy (``portqueue.pull``)."""
    return q("leased_jobs", jobs=_leases(leases))


# --- events ---


def jobs_by_id(q: Queries, job_ids: Sequence[str]) -> Query:
    """The snapshots event callbacks receive (``operations.job_snapshot``)."""
    return q("jobs_by_id", job_ids=list(job_ids))


# --- flow control (SPEC §8) ---


def declare_queue_limits(q: Queries, queue: str, declared: Mapping[str, Any]) -> Query:
    """The limits a worker's code declares for ``queue`` (``QueueSpec.declared_limits``);
    the ones it does not declare keep their stored value."""
    return operations.set_queue_limits_query(q, queue, **declared)


def lock_limited_queue(q: Queries, queue: str) -> Query:
    """The first statement of a limited claim's transaction (see claim_limited)."""
    return q("lock_limited_queue", queue=queue)


def claim_limited(q: Queries, *, queue: str, slots: int, lease_seconds: int,
                  matching_patterns: Sequence[str], refused_patterns: Sequence[str],
                  worker_id: str) -> Query:
    """``claim`` for one queue with a limit, after ``lock_limited_queue`` in the
    same transaction: at most what the queue's limits allow. Its rows are
    ``claim``'s, plus a ``RATE_LIMITED`` row when the rate held it back."""
    return q("claim_limited", queue=queue, slots=slots, lease_seconds=lease_seconds,
             matching_patterns=list(matching_patterns),
             refused_patterns=list(refused_patterns), worker_id=worker_id)


# The status of claim_limited's row saying when the rate lets a job start
# next: its data_json is the number of seconds until then.
RATE_LIMITED = "rate_limited"
# The status of claim's row naming a queue it passed over for its limits, and
# of claim_limited's naming a queue that has none any more: claim it the
# other way from then on. Neither is a job.
LIMITED = "limited"
UNLIMITED = "unlimited"
# The status of claim_plain's row saying that a pending job names a pattern or
# has a key, so it claimed nothing: claim with claim instead. Not a job.
MIXED = "mixed"


def claims(q: Queries, *, slots: Mapping[str, int], lease_seconds: Mapping[str, int],
           limited: Collection[str], matching_patterns: Sequence[str],
           refused_patterns: Sequence[str], worker_id: str,
           plain_only: bool = False) -> list[list[Query]]:
    """The statements claiming up to ``slots[queue]`` of each queue, one list per
    transaction, the rows of each list's last statement being the claim's:
    first the plain claim of every queue not in ``limited`` (one statement:
    ``claim_plain`` with ``plain_only``, which the worker passes until a claim
    says ``MIXED``, else ``claim``), then, for each queue in ``limited``, its
    lock and ``claim_limited``. The one place the choice is made, for the
    worker and for ``fetch_jobs``."""
    plain = {name: n for name, n in slots.items() if name not in limited}
    patterns = {"matching_patterns": matching_patterns, "refused_patterns": refused_patterns}
    transactions = []
    if plain and plain_only:
        transactions.append([claim_plain(q, slots=plain, lease_seconds=lease_seconds,
                                         worker_id=worker_id)])
    elif plain:
        transactions.append([claim(q, slots=plain, lease_seconds=lease_seconds,
                                   worker_id=worker_id, **patterns)])
    for name, n in slots.items():
        if name in limited:
            transactions.append([
                lock_limited_queue(q, name),
                claim_limited(q, queue=name, slots=n, lease_seconds=lease_seconds[name],
                              worker_id=worker_id, **patterns)])
    return transactions


# --- the listener ---


def queue_peers(q: Queries, worker_id: str, queues: Sequence[str]) -> Query:
    """This worker's rank among the live workers of each of ``queues``."""
    return q("queue_peers", id=worker_id, queues=list(queues))


def peer_ranks(rows: Rows) -> dict[str, int]:
    """Queue -> this worker's rank (1: the oldest live worker of the queue)."""
    return {str(row["queue"]): int(row["rank"]) for row in rows}


def peer_counts(rows: Rows) -> dict[str, int]:
    """Queue -> how many live workers it has."""
    return {str(row["queue"]): int(row["workers"]) for row in rows}


# --- judging a preferred_instance_key_pattern for one key ---


def pattern_check_deadline(q: Queries, *, milliseconds: int) -> Query:
    """The deadline of the check that follows, for the rest of its transaction
    (or savepoint)."""
    return q("pattern_check_deadline", milliseconds=str(milliseconds))


def check_pattern(q: Queries, *, instance_key: str, pattern: str) -> Query:
    """Whether ``instance_key`` matches ``pattern``, as a claim would match it."""
    return q("check_pattern", instance_key=instance_key, pattern=pattern)


def pattern_matches(rows: Rows) -> bool:
    return bool(rows and rows[-1]["matches"])


def begin_pattern_check(q: Queries) -> Query:
    """A savepoint around a pull consumer's check, in the caller's transaction."""
    return q("begin_pattern_check")


def end_pattern_check(q: Queries) -> Sequence[Query]:
    """Back to before ``begin_pattern_check``: its deadline ends, a refusal's
    error never aborts the caller's transaction."""
    return [q("end_pattern_check"), q("release_pattern_check")]


# --- the entries of the fenced writes ---
# Built once per job as JSON text (the completer sends them as they are).
# Progress and attrs are what the heartbeat has not written yet; None writes
# nothing new.


def completion_entry(job_id: str, lease_token: int, *, status: str, output_json: str,
                     progress: float | None = None,
                     attrs: Mapping[str, Any] | None = None) -> str:
    """A ``complete_jobs`` entry; ``output_json`` is the output already encoded."""
    if progress is None and attrs is None:
        # The common case, written directly (it runs for every job): the id
        # is a UUID's text, the token an int and the status a fixed word,
        # none of which needs escaping; absent keys read as NULL.
        return (f'{{"id":"{job_id}","lease_token":{lease_token},'
                f'"status":"{status}","output":{output_json}}}')
    head = json.dumps({"id": job_id, "lease_token": lease_token, "status": status,
                       "progress": progress, "attrs": attrs})
    return f'{head[:-1]},"output":{output_json}}}'


def failure_entry(job_id: str, lease_token: int, *, status: str, retry: bool,
                  delay_seconds: float, error: Mapping[str, Any],
                  progress: float | None = None,
                  attrs: Mapping[str, Any] | None = None) -> str:
    """A ``fail_jobs`` entry: ``status`` failed or cancelled; with ``retry``,
    back to pending ``delay_seconds`` later instead."""
    return json.dumps({"id": job_id, "lease_token": lease_token, "status": status,
                       "retry": retry, "delay_seconds": delay_seconds, "error": error,
                       "progress": progress, "attrs": attrs})


def snooze_entry(job_id: str, lease_token: int, *, delay_seconds: float,
                 progress: float | None = None,
                 attrs: Mapping[str, Any] | None = None) -> str:
    """A ``snooze_jobs`` entry: back to pending ``delay_seconds`` later."""
    return json.dumps({"id": job_id, "lease_token": lease_token,
                       "delay_seconds": delay_seconds, "progress": progress, "attrs": attrs})
