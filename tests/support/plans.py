"""Plans of the library's own statements: a large history to run them against,
EXPLAIN ANALYZE of one (rolled back), and reading an EXPLAIN (FORMAT JSON) plan."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
from psycopg import sql

from portqueue import worker_operations as ops
from portqueue.queries import Query, queries_for

Db = psycopg.Connection[Any]

FINISHED = 100_000
DELAYED = 20_000

LOAD = """
INSERT INTO {job} (id, queue, status, data, attempt, max_attempts,
                   created_at, start_after, started_at, finished_at)
SELECT gen_random_uuid(), 'plan', 'completed', '{{}}'::jsonb, 1, 1,
       now() - interval '2 days', now() - interval '2 days', now() - interval '2 days',
       now() - interval '1 day'
FROM generate_series(1, %(finished)s);
INSERT INTO {job} (id, queue, data, start_after, priority)
SELECT gen_random_uuid(), 'plan', '{{}}'::jsonb, now() + interval '1 day', %(priority)s
FROM generate_series(1, %(delayed)s);
"""


def load_history(db: Db, schema: str, *, delayed_priority: int = 0) -> None:
    """FINISHED completed and DELAYED future jobs (at ``delayed_priority``) on
    queue ``plan``, then ANALYZE."""
    with db.transaction():
        # Loaded, not added: no NOTIFY per statement for rows nobody waits on.
        db.execute("SET LOCAL session_replication_role = replica")
        for statement in LOAD.split(";"):
            if statement.strip():
                db.execute(sql.SQL(statement).format(job=sql.Identifier(schema, "job")),
                           {"finished": FINISHED, "delayed": DELAYED,
                            "priority": delayed_priority})
    db.execute(sql.SQL("VACUUM (ANALYZE) {}").format(sql.Identifier(schema, "job")))


def claim_statement(schema: str, name: str, queue: str, slots: int, *,
                    matching: Sequence[str] = (), refused: Sequence[str] = ()) -> Query:
    """The claim ``name`` (claim, claim_plain or claim_limited) a worker with
    ``slots`` free slots on ``queue`` sends, having judged the patterns
    ``matching`` to match its key and ``refused`` not to (none by default)."""
    q, worker_id = queries_for(schema), str(uuid.uuid4())
    patterns = {"matching_patterns": list(matching), "refused_patterns": list(refused)}
    if name == "claim_plain":
        return ops.claim_plain(q, slots={queue: slots}, lease_seconds={queue: 60},
                               worker_id=worker_id)
    if name == "claim_limited":
        return ops.claim_limited(q, queue=queue, slots=slots, lease_seconds=60,
                                 worker_id=worker_id, **patterns)
    return ops.claim(q, slots={queue: slots}, lease_seconds={queue: 60}, worker_id=worker_id,
                     **patterns)


def explain(db: Db, query: Query, *, fmt: str) -> Any:
    """EXPLAIN ANALYZE ``query`` in a transaction that is rolled back."""
    statement = f"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, FORMAT {fmt}) {query.sql}"
    with db.transaction(force_rollback=True):
        rows = db.execute(statement, dict(query.params)).fetchall()
    return rows[0][0] if fmt == "JSON" else "\n".join(row[0] for row in rows)


def plan_nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """``plan`` and every node below it, depth first."""
    yield plan
    for child in plan.get("Plans", []):
        yield from plan_nodes(child)


# Many running jobs: a statement joined plainly to a lease list scanned them all.
RUNNING = 2_000
# What a statement reading a few jobs may touch, whatever the table holds.
MAX_BUFFERS = 300
# What a statement naming its jobs by id may use: their primary key, and the
# singleton index retry's key check looks up.
BY_ID = {"job_pkey", "job_singleton_key_uq"}


def rows_examined(root: dict[str, Any]) -> int:
    """Rows the scans of the job table produced or filtered out, over all loops."""
    examined = 0
    for node in plan_nodes(root):
        if node.get("Relation Name") == "job" and "Scan" in node["Node Type"]:
            loops = node.get("Actual Loops", 1)
            examined += (node["Actual Rows"] + node.get("Rows Removed by Filter", 0)
                         + node.get("Rows Removed by Index Recheck", 0)) * loops
    return examined


def load_running(db: psycopg.Connection[Any], schema: str) -> None:
    """RUNNING active jobs in queue 'plan', written past the triggers, then analysed."""
    with db.transaction():
        db.execute("SET LOCAL session_replication_role = replica")
        db.execute(sql.SQL(
            "INSERT INTO {} (id, queue, status, data, attempt, lease_token, lease_expires_at,"
            " started_at) SELECT gen_random_uuid(), 'plan', 'active', '{{}}', 1, 1,"
            " now() + interval '1 hour', now() FROM generate_series(1, %s)").format(
            sql.Identifier(schema, "job")), [RUNNING])
    db.execute(sql.SQL("VACUUM (ANALYZE) {}").format(sql.Identifier(schema, "job")))
