"""Issue 24, point 4 of docs/retention.md's design: every statement that writes
live jobs names their statuses, so on the partitioned layout (``job`` by
status into ``job_live`` and day partitions of finished jobs) the planner
prunes its UPDATE to ``job_live`` at plan time. A statement planned over
every partition writes (and locks) every partition: each claim would wait
behind a DROP of an old day, and the claims queued behind the DROP too.

The layout is built in a schema of its own (tests/support/partitioned.py) and
each statement is EXPLAINed (not run) with the parameters a worker sends: an
``Update on`` per leaf is the regression this catches."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from portqueue import maintenance_operations as maintenance
from portqueue import worker_operations as ops
from portqueue.queries import Query, queries_for
from tests.support.partitioned import partitioned_schema
from tests.support.plans import plan_nodes

Db = psycopg.Connection[Any]

SCHEMA = "pq_partition_plans"
JOB = str(uuid.UUID(int=1))
LEASE = ops.Lease(JOB, 1)


@pytest.fixture(scope="module")
def partitioned(pg_dsn: str) -> Iterator[str]:
    with partitioned_schema(pg_dsn, SCHEMA) as schema:
        yield schema


def _written_leaves(db: Db, query: Query) -> list[list[str]]:
    """The leaves each UPDATE or DELETE on job is planned over."""
    with db.transaction(force_rollback=True):
        ((plan,),) = db.execute(f"EXPLAIN (COSTS OFF, FORMAT JSON) {query.sql}",
                                dict(query.params)).fetchall()
    return [[target["Relation Name"] for target in node.get("Target Tables", [])]
            for node in plan_nodes(plan[0]["Plan"])
            if node["Node Type"] == "ModifyTable" and node.get("Relation Name") == "job"
            and node["Operation"] in ("Update", "Delete")]


def _statements(schema: str) -> list[Query]:
    q = queries_for(schema)
    worker = str(uuid.uuid4())
    return [
        ops.claim(q, slots={"plan": 10}, lease_seconds={"plan": 60}, matching_patterns=[],
                  refused_patterns=[], worker_id=worker),
        ops.claim_limited(q, queue="plan", slots=10, lease_seconds=60, matching_patterns=[],
                          refused_patterns=[], worker_id=worker),
        ops.complete_jobs(q, [ops.completion_entry(JOB, 1, status="completed",
                                                   output_json="null")]),
        ops.fail_jobs(q, [ops.failure_entry(JOB, 1, status="failed", retry=True,
                                            delay_seconds=1, error={"message": "x"})]),
        ops.snooze_jobs(q, [ops.snooze_entry(JOB, 1, delay_seconds=1)]),
        ops.touch_jobs(q, [ops.Touch(LEASE, 60, None, None)]),
        ops.release_jobs(q, [LEASE]),
        maintenance.rescue_lapsed(q, limit=100),
        maintenance.expire_pending(q, limit=100),
        q("cancel_job", job_id=JOB, cancel_channel=q.cancel_channel),
        q("cancel_jobs_by_id", job_ids=[JOB], cancel_channel=q.cancel_channel),
        q("complete_redriven", copies=json.dumps([{"id": JOB, "job_id": JOB}])),
    ]


@pytest.mark.parametrize("index", range(len(_statements("portqueue"))))
def test_a_write_of_live_jobs_is_planned_on_the_live_partition_only(
    db: Db, partitioned: str, index: int
) -> None:
    query = _statements(partitioned)[index]
    written = _written_leaves(db, query)
    assert written, f"{query.name}: no UPDATE of job planned"
    assert all(leaves == ["job_live"] for leaves in written), (query.name, written)


def test_a_write_naming_no_status_is_planned_on_every_partition(
    db: Db, partitioned: str
) -> None:
    # The check can fail: a write by id alone goes to every leaf.
    query = Query("by_id", sql.SQL("UPDATE {} SET progress = 1 WHERE id = %(id)s").format(
        sql.Identifier(partitioned, "job")).as_string(db), {"id": JOB})
    (leaves,) = _written_leaves(db, query)
    assert len(leaves) > 1 and "job_live" in leaves
