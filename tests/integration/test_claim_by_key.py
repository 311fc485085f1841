"""Issue 19: a claim limited per key reads none of the keyed backlog to find the
jobs without a key, and every claim still takes keyed and unkeyed jobs in claim
order (migration 0017).

``job_claim_idx`` held keyed jobs too, so ``claim_limited``'s step for jobs
without a key read it past every pending keyed job at each claim (20,000 of
them: 8.3 of a claim's 12.1 ms). Keyed jobs now live in ``job_claim_keyed_idx``.
Checked by the rows the claim's scans of the job table examine (EXPLAIN
ANALYZE), not by timing, and by what the claims take.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import psycopg
from psycopg import sql

from portqueue import PortQueue
from portqueue import worker_operations as ops
from portqueue.queries import Query, queries_for
from tests.support.plans import explain, plan_nodes, rows_examined
from tests.support.rows import insert_pending

Db = psycopg.Connection[Any]

QUEUE = "tenants"
KEYS = 5
KEYED = 5_000  # pending keyed jobs, at a higher priority than the unkeyed ones
UNKEYED = 20
SLOTS = 10
# One probe per key for the loose index scan and one per key's first job, the
# unkeyed jobs claimed: tens of rows. Reading the keyed backlog is thousands.
MAX_ROWS_EXAMINED = 100


def load(db: Db, schema: str) -> None:
    job = sql.Identifier(schema, "job")
    with db.transaction():
        for key in range(KEYS):
            insert_pending(db, schema, QUEUE, KEYED // KEYS, 5, partition_key=f"k{key}")
        insert_pending(db, schema, QUEUE, UNKEYED, 0)
    db.execute(sql.SQL("VACUUM (ANALYZE) {}").format(job))


def limited_claim(schema: str) -> Query:
    return ops.claim_limited(queries_for(schema), queue=QUEUE, slots=SLOTS, lease_seconds=60,
                             matching_patterns=[], refused_patterns=[],
                             worker_id=str(uuid.uuid4()))


def plain_claim(schema: str) -> Query:
    return ops.claim(queries_for(schema), slots={QUEUE: SLOTS}, lease_seconds={QUEUE: 60},
                     matching_patterns=[], refused_patterns=[], worker_id=str(uuid.uuid4()))


def indexes_read(root: dict[str, Any]) -> set[str]:
    """The indexes of scans that ran (at least one loop)."""
    return {node["Index Name"] for node in plan_nodes(root)
            if "Index Name" in node and node.get("Actual Loops", 0) > 0}


def test_a_claim_limited_per_key_reads_none_of_the_keyed_backlog_for_unkeyed_jobs(
    pq: PortQueue, db: Db, schema: str,
) -> None:
    pq.set_queue_limits(queue=QUEUE, partition_concurrency=1)
    load(db, schema)
    (result,) = explain(db, limited_claim(schema), fmt="JSON")
    root = result["Plan"]
    examined = rows_examined(root)
    assert examined <= MAX_ROWS_EXAMINED, (
        f"{examined} rows examined for a claim of {SLOTS}:\n{json.dumps(root, indent=1)}")
    assert "job_claim_keyed_idx" not in indexes_read(root)
    assert {"job_claim_idx", "job_partition_idx"} <= indexes_read(root)
    # One job of each key (they rank first by priority), the rest without a key.
    keys = claimed_keys(db, schema, limited_claim(schema))
    assert len(keys) == SLOTS
    assert sorted(k for k in keys if k is not None) == [f"k{n}" for n in range(KEYS)]
    assert keys.count(None) == SLOTS - KEYS


def test_a_queue_limited_globally_claims_keyed_and_unkeyed_jobs_in_claim_order(
    pq: PortQueue, db: Db, schema: str,
) -> None:
    pq.set_queue_limits(queue=QUEUE, global_concurrency=100)
    load(db, schema)
    (result,) = explain(db, limited_claim(schema), fmt="JSON")
    root = result["Plan"]
    assert rows_examined(root) <= MAX_ROWS_EXAMINED, json.dumps(root, indent=1)
    assert "job_claim_keyed_idx" in indexes_read(root)
    # The keyed jobs rank first (priority 5): no key limit, so ten of them.
    keys = claimed_keys(db, schema, limited_claim(schema))
    assert len(keys) == SLOTS and None not in keys


def test_the_plain_claim_takes_keyed_and_unkeyed_jobs_in_claim_order(
    db: Db, schema: str,
) -> None:
    load(db, schema)
    (result,) = explain(db, plain_claim(schema), fmt="JSON")
    root = result["Plan"]
    assert rows_examined(root) <= MAX_ROWS_EXAMINED, json.dumps(root, indent=1)
    assert {"job_claim_idx", "job_claim_keyed_idx"} <= indexes_read(root)
    keys = claimed_keys(db, schema, plain_claim(schema))
    assert len(keys) == SLOTS and None not in keys  # priority 5 first
    # With the keyed jobs behind, the unkeyed come first.
    db.execute(sql.SQL("UPDATE {} SET priority = 9 WHERE partition_key IS NULL").format(
        sql.Identifier(schema, "job")))
    keys = claimed_keys(db, schema, plain_claim(schema))
    assert keys == [None] * SLOTS
    # Keyed jobs alone, and unkeyed alone, each claimed from their own index.
    db.execute(sql.SQL("DELETE FROM {} WHERE partition_key IS NULL").format(
        sql.Identifier(schema, "job")))
    assert len(claimed_keys(db, schema, plain_claim(schema))) == SLOTS


def claimed_keys(db: Db, schema: str, query: Query) -> list[str | None]:
    """The partition_key of each job the claim takes, in the claim's (rolled back)."""
    with db.transaction(force_rollback=True):
        rows = db.execute(query.sql, dict(query.params)).fetchall()
        ids = [row[0] for row in rows if row[0] is not None and row[2] == "active"]
        keys = dict(db.execute(sql.SQL(
            "SELECT id::text, partition_key FROM {} WHERE id = ANY(%s::uuid[])").format(
                sql.Identifier(schema, "job")), [ids]).fetchall())
    return [keys[job_id] for job_id in ids]


def test_the_plain_claim_of_many_queues_skips_the_keyed_ranges_when_no_job_has_a_key(
    pq: PortQueue, db: Db, schema: str,
) -> None:
    pq.add_jobs(queue="q0", jobs=[{"data": {"n": n}} for n in range(SLOTS)])
    queues = [f"q{n}" for n in range(50)]
    query = ops.claim(queries_for(schema), slots=dict.fromkeys(queues, 1),
                      lease_seconds=dict.fromkeys(queues, 60), matching_patterns=[],
                      refused_patterns=[], worker_id=str(uuid.uuid4()))
    (result,) = explain(db, query, fmt="JSON")
    nodes = list(plan_nodes(result["Plan"]))
    # The per-queue scans of the keyed range never ran: one probe said no job has a key.
    per_queue = [node.get("Actual Loops", 0) for node in nodes
                 if node.get("Index Name") == "job_claim_keyed_idx"
                 and "wanted" in node.get("Index Cond", "")]
    assert per_queue == [0], json.dumps(result["Plan"], indent=1)
    assert result["Plan"]["Actual Rows"] == 1
