"""The background services' and the demo's database contract
(portqueue/maintenance_operations.py, portqueue/demo_operations.py): every
statement builder binds exactly the parameters its query names, so a typo in
a parameter fails here (and its typed signature fails mypy), not in a
maintenance pass."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone

from portqueue import demo_operations as demo
from portqueue import maintenance_operations as ops
from portqueue.queries import Query, queries_for
from portqueue.types import FOREVER, Retention

q = queries_for("portqueue")
_PLACEHOLDER = re.compile(r"%\((\w+)\)s")
AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
AFTER = ops.PruneBatch(deleted=3, candidates=10, last_finished_at=AT,
                       last_id="0192f3e4-0000-7000-8000-000000000001")
WORK = [ops.PruneWork(rule=rule, queue="q", status="completed", ttl=60, keep=5)
        for rule in ("own_ttl", "own_completed_ttl", "own_failed_ttl", "queue_ttl", "count")]
TICK = ops.Tick(schedule_id="s", job_id="j", scheduled_for=AT, next_run_at=None, spawn=True)

BUILT: list[Query] = [
    ops.try_lock(q, key=1),
    ops.set_statement_timeout(q, milliseconds=30_000),
    ops.disable_jit(q),
    ops.rescue_lapsed(q, limit=500),
    ops.expire_pending(q, limit=1000),
    ops.reap_workers(q, limit=500, min_silence_seconds=300, default_lease_seconds=60),
    ops.prune_work(q, default_retention_seconds=60, default_retention=Retention()),
    *(ops.prune_batch(q, work, limit=1000, waited_grace_seconds=60, after=after)
      for work in WORK for after in (None, AFTER)),
    ops.lock_due_schedules(q, limit=100, passed_over={"b", "a"}),
    ops.spawn_scheduled_jobs(q, [TICK]),
    ops.next_schedule_due(q),
    ops.schedule_due_in(q, passed_over={"b"}),
    demo.lock(q, key=1),
    demo.schema_comment(q, schema="portqueue_demo"),
    demo.drop_schema(q),
    demo.mark_schema(q),
    demo.throughput(q, job_ids=["j"]),
    demo.latency(q, job_ids=["j"]),
]


def test_each_statement_binds_exactly_what_its_query_names() -> None:
    for query in BUILT:
        named = set(_PLACEHOLDER.findall(query.sql))
        assert named == set(query.params), (query.name, named ^ set(query.params))


def test_each_prune_rule_has_its_own_statement() -> None:
    names = [ops.prune_batch(q, work, limit=1, waited_grace_seconds=0, after=None).name
             for work in WORK]
    assert names == ["prune_by_own_ttl", "prune_by_own_completed_ttl",
                     "prune_by_own_failed_ttl", "prune_by_queue_ttl", "prune_by_count"]
    batch = ops.prune_batch(q, WORK[0], limit=1, waited_grace_seconds=0, after=AFTER)
    assert (batch.params["after_finished_at"], batch.params["after_id"]) == (AT, AFTER.last_id)


def test_the_client_defaults_reach_prune_work() -> None:
    query = ops.prune_work(q, default_retention_seconds=7, default_retention=Retention(
        completed_ttl_seconds=1, failed_ttl_seconds=2, keep_completed=3, keep_failed=4))
    assert {key: query.params[key] for key in (
        "default_ttl_seconds", "default_completed_ttl_seconds", "default_failed_ttl_seconds",
        "default_keep_completed", "default_keep_failed", "forever")} == {
        "default_ttl_seconds": 7, "default_completed_ttl_seconds": 1,
        "default_failed_ttl_seconds": 2, "default_keep_completed": 3,
        "default_keep_failed": 4, "forever": FOREVER}


def test_ticks_are_sent_as_the_spawn_statement_reads_them() -> None:
    following = ops.Tick(schedule_id="s", job_id="j", scheduled_for=AT, next_run_at=AT,
                         spawn=False)
    query = ops.spawn_scheduled_jobs(q, [TICK, following])
    assert json.loads(query.params["ticks"]) == [
        {"schedule_id": "s", "job_id": "j", "scheduled_for": AT.isoformat(),
         "next_run_at": None, "spawn": True},
        {"schedule_id": "s", "job_id": "j", "scheduled_for": AT.isoformat(),
         "next_run_at": AT.isoformat(), "spawn": False}]
    assert ops.lock_due_schedules(q, limit=1, passed_over={"b", "a"}).params[
        "passed_over"] == ["a", "b"]


def test_decoders() -> None:
    assert ops.lock_acquired([{"acquired": True}]) is True
    assert ops.rescued([{"id": "a", "queue": "q"}]) == (["a"], ["q"])
    assert ops.seconds_until_due([{"seconds": None}]) is None
    assert ops.seconds_until_due([{"seconds": 1.5}]) == 1.5
    assert ops.pruned([{"deleted": 1, "candidates": 2, "last_finished_at": None,
                        "last_id": None}]) == ops.PruneBatch(1, 2, None, None)
    assert ops.prune_work_items([{"rule": "count", "queue": "q", "status": "failed",
                                  "ttl": None, "keep": 5}]) == [
        ops.PruneWork("count", "q", "failed", None, 5)]
