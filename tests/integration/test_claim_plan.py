"""SPEC §5 / issue 4: the claim's cost follows what it claims, not the table.

With a large history (finished jobs) and a backlog of future-delayed jobs in
the table, the worker's claim statement must reach the ready jobs through the
partial claim index, never a scan of the job table, and touch a handful of
pages. The plan is read with ``EXPLAIN (ANALYZE, BUFFERS)``; the statement is
the worker's own named query with the parameters a worker sends.

``python -m tests.integration.test_claim_plan DSN`` prints the plan that
docs/schema.md quotes.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import psycopg
import pytest
from psycopg import sql

from portqueue import PortQueue
from portqueue.queries import Query, positional
from portqueue.worker import connections
from tests.support.plans import DELAYED, claim_statement, explain, load_history, plan_nodes
from tests.support.rows import insert_pending

Db = psycopg.Connection[Any]

READY = 50
CLAIMED = 10
# A claim of 10 jobs reads the index pages leading to them, the heap pages
# holding them and the queue row: tens of buffers. A scan of the table
# load_history fills would read thousands.
MAX_BUFFERS = 300


def claim_query(schema: str) -> Query:
    """The claim a worker with 10 free slots on queue ``plan`` sends."""
    return claim_statement(schema, "claim", "plan", CLAIMED)


def test_the_claim_reads_a_few_pages_whatever_the_history(pq: PortQueue, db: Db,
                                                        schema: str) -> None:
    pq.add_jobs(queue="plan", jobs=[{"data": {"n": n}} for n in range(READY)])
    load_history(db, schema)

    (result,) = explain(db, claim_query(schema), fmt="JSON")
    root = result["Plan"]
    nodes = list(plan_nodes(root))
    scanned = [node.get("Relation Name") for node in nodes if node["Node Type"] == "Seq Scan"]
    assert "job" not in scanned, json.dumps(root, indent=1)
    claim_scans = [node for node in nodes if node.get("Index Name") == "job_claim_idx"]
    assert claim_scans, "the ready jobs are found through job_claim_idx"
    assert root["Actual Rows"] == CLAIMED
    buffers = root["Shared Hit Blocks"] + root["Shared Read Blocks"]
    assert buffers <= MAX_BUFFERS, f"{buffers} buffers for a claim of {CLAIMED}"


CLAIM_INDEXES = {"job_claim_idx", "job_claim_keyed_idx", "job_partition_idx",
                 "job_claim_patterned_idx"}
# A claim of 10 descends the claim index once per priority level and once
# for the ready range: a few pages each, and as many again per partition key.
# Walking the delayed entries in front of the ready ones reads a hundred leaf
# pages (DELAYED) and 25 per key (DELAYED_PER_KEY).
MAX_CLAIM_INDEX_BUFFERS = 40
MAX_CLAIM_INDEX_BUFFERS_PER_KEY = 12
DELAYED_PER_KEY = 5_000
PATTERN = "^worker-"


def claim_index_buffers(root: dict[str, Any]) -> int:
    """Pages the scans of the claim indexes read (with the heap pages they fetched)."""
    return sum(node["Shared Hit Blocks"] + node["Shared Read Blocks"]
               for node in plan_nodes(root) if node.get("Index Name") in CLAIM_INDEXES)


@pytest.mark.parametrize("name", ["claim", "claim_plain", "claim_limited",
                                  "claim_limited_by_key", "claim_patterned",
                                  "claim_limited_patterned"])
def test_delayed_jobs_at_a_higher_priority_cost_a_claim_nothing(
    pq: PortQueue, db: Db, schema: str, name: str,
) -> None:
    # Before: the claim read the index in (priority DESC, start_after) order
    # with the due time as a filter, through every delayed entry of a higher
    # priority before the first ready job (issue 23: 0.16x the drain with a
    # million of them). Now it reads one priority level at a time.
    load_history(db, schema, delayed_priority=5)
    if name == "claim_limited_by_key":
        pq.set_queue_limits(queue="plan", partition_concurrency=1)
        with db.transaction():
            for key in range(CLAIMED):
                insert_pending(db, schema, "plan", DELAYED_PER_KEY, 5, partition_key=f"k{key}",
                               start_after="tomorrow")
                insert_pending(db, schema, "plan", 2, 0, partition_key=f"k{key}")
        db.execute(sql.SQL("VACUUM (ANALYZE) {}").format(sql.Identifier(schema, "job")))
    elif name.endswith("_patterned"):
        # Jobs that name a pattern are read by pattern (job_claim_patterned_idx),
        # a range per pattern the worker matches, one level at a time too.
        with db.transaction():
            insert_pending(db, schema, "plan", DELAYED, 5, start_after="tomorrow",
                           preferred_instance_key_pattern=PATTERN)
            insert_pending(db, schema, "plan", READY, 0, preferred_instance_key_pattern=PATTERN)
        db.execute(sql.SQL("VACUUM (ANALYZE) {}").format(sql.Identifier(schema, "job")))
    else:
        pq.add_jobs(queue="plan", jobs=[{"data": {"n": n}} for n in range(READY)])
    if name in ("claim_limited", "claim_limited_patterned"):
        pq.set_queue_limits(queue="plan", global_concurrency=100)
    kind = "claim_limited" if name.startswith("claim_limited") else name.removesuffix("_patterned")
    query = claim_statement(schema, kind, "plan", CLAIMED, matching=[PATTERN])
    (result,) = explain(db, query, fmt="JSON")
    root = result["Plan"]
    assert root["Actual Rows"] == CLAIMED, json.dumps(root, indent=1)
    read = claim_index_buffers(root)
    keys = CLAIMED if name == "claim_limited_by_key" else 0
    most = MAX_CLAIM_INDEX_BUFFERS + keys * MAX_CLAIM_INDEX_BUFFERS_PER_KEY
    assert read <= most, f"{read} pages:\n{json.dumps(root, indent=1)}"


def generic_plan(db: Db, query: Query) -> dict[str, Any]:
    """EXPLAIN ANALYZE of ``query`` on the plan the worker's claim session
    runs it on: prepared, under plan_cache_mode = force_generic_plan (rolled back)."""
    # Every parameter of the claim carries its cast, so PREPARE infers its type.
    prepared = positional(query.sql)
    db.execute("SET plan_cache_mode = force_generic_plan")
    db.execute(sql.SQL("PREPARE claim_generic AS {}").format(sql.SQL(prepared.sql)))
    try:
        arguments = sql.SQL(", ").join(sql.Literal(query.params[name])
                                       for name in prepared.names)
        with db.transaction(force_rollback=True):
            ((result,),) = psycopg.ClientCursor(db).execute(sql.SQL(
                "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, FORMAT JSON) "
                "EXECUTE claim_generic ({})").format(arguments)).fetchall()
        ((generic,),) = db.execute("SELECT generic_plans FROM pg_prepared_statements "
                                   "WHERE name = 'claim_generic'").fetchall()
        assert generic >= 1, "EXPLAIN EXECUTE ran the generic plan"
    finally:
        db.execute("DEALLOCATE claim_generic")
        db.execute("RESET plan_cache_mode")
    plan: dict[str, Any] = result[0]["Plan"]
    return plan


def test_the_claims_generic_plan_reads_a_few_pages_too(pq: PortQueue, db: Db,
                                                        schema: str) -> None:
    # The worker's claim session plans the claim once (connections.role_kwargs):
    # that plan must cost what it claims as a fresh one does.
    pq.add_jobs(queue="plan", jobs=[{"data": {"n": n}} for n in range(READY)])
    load_history(db, schema)

    root = generic_plan(db, claim_query(schema))
    nodes = list(plan_nodes(root))
    scanned = [node.get("Relation Name") for node in nodes if node["Node Type"] == "Seq Scan"]
    assert "job" not in scanned, json.dumps(root, indent=1)
    assert any(node.get("Index Name") == "job_claim_idx" for node in nodes)
    assert root["Actual Rows"] == CLAIMED
    buffers = root["Shared Hit Blocks"] + root["Shared Read Blocks"]
    assert buffers <= MAX_BUFFERS, f"{buffers} buffers for a claim of {CLAIMED}"


def test_the_claim_session_keeps_one_plan_of_each_statement(pq: PortQueue) -> None:
    settings = pq._settings
    # poll_only (through PgBouncer) sends no startup options: the claim session
    # keeps the server's default there, as every other session does.
    kept = "auto" if settings.poll_only else "force_generic_plan"
    with psycopg.connect(settings.dsn, **connections.role_kwargs(settings, "fetcher")) as conn:
        assert conn.execute("SHOW plan_cache_mode").fetchall() == [(kept,)]
    # The pool's sessions keep the server's default.
    with psycopg.connect(settings.dsn, **connections.role_kwargs(settings, "worker")) as conn:
        assert conn.execute("SHOW plan_cache_mode").fetchall() == [("auto",)]


def test_the_workers_own_sessions_never_jit_compile(pq: PortQueue) -> None:
    # A claim_limited on a generic plan estimated high enough to be compiled
    # took 100-200 ms instead of 1-4 (docs/performance.md).
    settings = pq._settings
    with psycopg.connect(settings.dsn) as conn:
        server_default = conn.execute("SHOW jit").fetchall()[0][0]
    kept = server_default if settings.poll_only else "off"
    for role in connections.STATEMENT_SECONDS:
        with psycopg.connect(settings.dsn, **connections.role_kwargs(settings, role)) as conn:
            assert conn.execute("SHOW jit").fetchall() == [(kept,)], role


def main(dsn: str) -> None:
    schema = "portqueue_plan_demo"
    with PortQueue(dsn, schema=schema) as pq, psycopg.connect(dsn, autocommit=True) as db:
        db.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        pq.migrate()
        pq.add_jobs(queue="plan", jobs=[{"data": {"n": n}} for n in range(READY)])
        load_history(db, schema)
        print(explain(db, claim_query(schema), fmt="TEXT"))
        db.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


if __name__ == "__main__":
    main(sys.argv[1])
