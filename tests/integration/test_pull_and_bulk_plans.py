"""The statements of issue 21 cost what they touch, not the table: with a
large history, running jobs and a delayed backlog in it, the pull consumer's
lease read, the bulk retry and cancel by id, and the redrive's statements
reach their rows by primary key or a partial index, never a scan of the job
table, and read a bounded number of pages. Plans as in test_claim_plan.py:
``EXPLAIN (ANALYZE, BUFFERS)`` of the named query with the parameters the
client sends, rolled back."""

from __future__ import annotations

import json
from typing import Any

import psycopg

from portqueue import PortQueue
from portqueue import worker_operations as ops
from portqueue.queries import Query, queries_for
from tests.support.plans import (
    BY_ID,
    MAX_BUFFERS,
    explain,
    load_history,
    load_running,
    plan_nodes,
)
from tests.support.rows import set_dead_letter_queue

Db = psycopg.Connection[Any]


def _assert_cheap(db: Db, query: Query, *, by_id: bool = True) -> None:
    (result,) = explain(db, query, fmt="JSON")
    root = result["Plan"]
    nodes = list(plan_nodes(root))
    scanned = [node.get("Relation Name") for node in nodes if node["Node Type"] == "Seq Scan"]
    assert "job" not in scanned, (query.name, json.dumps(root, indent=1))
    if by_id:
        indexes = {node["Index Name"] for node in nodes if "Index Name" in node}
        assert indexes <= BY_ID, (query.name, indexes)
    buffers = root["Shared Hit Blocks"] + root["Shared Read Blocks"]
    assert buffers <= MAX_BUFFERS, f"{query.name}: {buffers} buffers"


def test_the_new_statements_read_a_few_pages_whatever_the_history(
    pq: PortQueue, db: Db, schema: str
) -> None:
    set_dead_letter_queue(db, schema, "src", "src-dead")
    pq.add_jobs(queue="src", jobs=[{"data": {"n": n}} for n in range(5)])
    fetched = pq.fetch_jobs(queue="src", limit=5)
    for job in fetched[:3]:
        pq.fail_job(job_id=job.job_id, lease_token=job.lease_token, error="x", retry=False)
    load_history(db, schema)
    load_running(db, schema)
    q = queries_for(schema)
    held = [ops.Lease(job.job_id, job.lease_token) for job in fetched[3:]]
    ids = [job.job_id for job in fetched]
    copies = [{"id": copy.job_id, "job_id": copy.job_id}
              for copy in pq.get_jobs(queue="src-dead").items]

    _assert_cheap(db, ops.leased_jobs(q, held))
    _assert_cheap(db, q("retry_jobs_by_id", job_ids=ids))
    _assert_cheap(db, q("cancel_jobs_by_id", job_ids=ids, cancel_channel=q.cancel_channel))
    _assert_cheap(db, q("redrive_copies", queue="src-dead", limit=None), by_id=False)
    _assert_cheap(db, q("complete_redriven", copies=json.dumps(copies)))
