"""The worker's database contract (portqueue/worker_operations.py): every
statement builder binds exactly the parameters its query names, so a typo in
a parameter fails here (and its typed signature fails mypy), not on a
running worker."""

from __future__ import annotations

import json
import re

from portqueue import worker_operations as ops
from portqueue.queries import Query, queries_for

q = queries_for("portqueue")
LEASE = ops.Lease("0192f3e4-0000-7000-8000-000000000001", 7)
_PLACEHOLDER = re.compile(r"%\((\w+)\)s")

BUILT: list[Query] = [
    ops.upsert_queue(q, {
        "queue": "q", "concurrency": 1, "max_attempts": None, "retry_delay_seconds": None,
        "backoff_strategy": None, "backoff_factor": None, "backoff_max_delay_seconds": None,
        "backoff_jitter": None, "expire_in_seconds": None, "retention_ttl_seconds": None,
        "retention_keep_completed": True, "retention_keep_failed": True,
        "timeout_seconds": None, "lease_seconds": 60, "dead_letter_queue": None,
        "retention_completed_ttl_seconds": None, "retention_failed_ttl_seconds": None}),
    ops.register_worker(q, worker_id="w", instance_key=None, hostname="h", pid=1,
                        queues=["q"], concurrency=1),
    ops.unregister_worker(q, "w"),
    ops.release_jobs(q, [LEASE]),
    ops.end_sessions(q, [1]),
    ops.claim(q, slots={"q": 2}, lease_seconds={"q": 60}, matching_patterns=[],
              refused_patterns=[], worker_id="w"),
    ops.complete_jobs(q, ['{"id": "x"}']),
    ops.fail_jobs(q, ['{"id": "x"}']),
    ops.settled_by_lease(q, [LEASE]),
    ops.touch_jobs(q, [ops.Touch(LEASE, 60, None, None)]),
    ops.jobs_by_id(q, [LEASE.id]),
    ops.leased_jobs(q, [LEASE]),
    ops.pattern_check_deadline(q, milliseconds=100),
    ops.check_pattern(q, instance_key="k", pattern="^k"),
    ops.begin_pattern_check(q),
    *ops.end_pattern_check(q),
]


def test_each_statement_binds_exactly_what_its_query_names() -> None:
    for query in BUILT:
        named = set(_PLACEHOLDER.findall(query.sql))
        assert named == set(query.params), (query.name, named ^ set(query.params))


def test_the_claim_lists_its_queues_slots_and_leases_in_one_order() -> None:
    query = ops.claim(q, slots={"b": 2, "a": 5}, lease_seconds={"a": 30, "b": 60},
                      matching_patterns=["x"], refused_patterns=["y"], worker_id="w")
    assert query.params["queues"] == ["b", "a"]
    assert query.params["slots"] == [2, 5]
    assert query.params["lease_seconds"] == [60, 30]
    assert (query.params["matching_patterns"], query.params["refused_patterns"]) == (["x"], ["y"])


def test_decoders() -> None:
    assert ops.completed_ids([{"ids": ["a", "b"]}]) == {"a", "b"}
    assert ops.completed_ids([]) == set()
    assert ops.failed_ids([{"id": "a"}]) == {"a"}
    assert ops.touched([{"id": "a", "cancel_requested": True}]) == {"a": True}
    assert ops.settled_statuses([{"id": "a", "status": "completed"}]) == {"a": "completed"}
    assert ops.pattern_matches([{"matches": True}]) is True
    assert ops.pattern_matches([]) is False


def test_the_fenced_writes_entries_as_their_statements_read_them() -> None:
    plain = ops.completion_entry(LEASE.id, 7, status="completed", output_json='{"a":1}')
    assert json.loads(plain) == {"id": LEASE.id, "lease_token": 7, "status": "completed",
                                 "output": {"a": 1}}
    reported = ops.completion_entry(LEASE.id, 7, status="cancelled", output_json="null",
                                    progress=0.5, attrs={"k": "v\""})
    assert json.loads(reported) == {"id": LEASE.id, "lease_token": 7, "status": "cancelled",
                                    "progress": 0.5, "attrs": {"k": "v\""}, "output": None}
    failure = ops.failure_entry(LEASE.id, 7, status="failed", retry=True, delay_seconds=2.0,
                                error={"type": "E"})
    assert json.loads(failure) == {"id": LEASE.id, "lease_token": 7, "status": "failed",
                                   "retry": True, "delay_seconds": 2.0, "error": {"type": "E"},
                                   "progress": None, "attrs": None}
    snooze = ops.snooze_entry(LEASE.id, 7, delay_seconds=3.0, attrs={"n": 1})
    assert json.loads(snooze) == {"id": LEASE.id, "lease_token": 7, "delay_seconds": 3.0,
                                  "progress": None, "attrs": {"n": 1}}
