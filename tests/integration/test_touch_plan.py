"""The heartbeat's touch costs the leases it names, not the running jobs: with
many jobs running (and a large history), ``touch_jobs`` reaches its rows by
primary key, as ``leased_jobs`` and ``complete_jobs`` do, and reads a bounded
number of pages. Joined plainly to its recordset, the planner scanned
``job_lease_idx`` (every running job) at every heartbeat of every worker."""

from __future__ import annotations

import json
from typing import Any

import psycopg

from portqueue import PortQueue
from portqueue import worker_operations as ops
from portqueue.queries import queries_for
from tests.support.plans import BY_ID, MAX_BUFFERS, explain, load_history, load_running, plan_nodes

Db = psycopg.Connection[Any]


def test_touch_reaches_its_jobs_by_primary_key_whatever_runs(
    pq: PortQueue, db: Db, schema: str
) -> None:
    pq.add_jobs(queue="held", jobs=[{"data": {"n": n}} for n in range(3)])
    fetched = pq.fetch_jobs(queue="held", limit=3)
    load_history(db, schema)
    load_running(db, schema)
    q = queries_for(schema)
    touch = ops.touch_jobs(q, [ops.Touch(ops.Lease(job.job_id, job.lease_token), 60, 0.5, None)
                               for job in fetched])

    (result,) = explain(db, touch, fmt="JSON")
    root = result["Plan"]
    nodes = list(plan_nodes(root))
    indexes = {node["Index Name"] for node in nodes if "Index Name" in node}
    assert indexes <= BY_ID, (indexes, json.dumps(root, indent=1))
    assert not [n for n in nodes if n["Node Type"] == "Seq Scan"
                and n.get("Relation Name") == "job"], json.dumps(root, indent=1)
    buffers = root["Shared Hit Blocks"] + root["Shared Read Blocks"]
    assert buffers <= MAX_BUFFERS, f"{buffers} buffers"
    # And it still touches them (rolled back by explain; run it for real).
    rows = db.execute(touch.sql, dict(touch.params)).fetchall()
    assert len(rows) == 3
