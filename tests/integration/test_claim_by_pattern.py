"""Issue 16.2: patterned jobs a worker cannot match are not read by its claims.

The claim used to walk ``job_claim_idx`` over every pending job ahead of the
plain ones, reading each row to see its pattern and passing over those the
worker had refused, at every claim: 100,000 such jobs at a higher priority
slowed a drain of plain jobs about 15x. Patterned jobs now live in
``job_claim_patterned_idx``, by pattern, and a claim reads only the ranges of
the patterns its worker matches. Checked by the rows the claim's scans of the
job table examine (EXPLAIN ANALYZE), not by timing: a claim of 10 reads about
10 rows, whatever the refused backlog ahead of them.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql

from portqueue.queries import queries_for
from tests.support.plans import explain, rows_examined
from tests.support.rows import insert_pending

Db = psycopg.Connection[Any]

QUEUE = "hosts"
REFUSED = 5_000  # jobs of a pattern the worker refused, ahead of the plain ones
SLOTS = 10
# The claim's reads of the job table: its 10 plain rows, the matching pattern's
# few, one probe per distinct pattern present. Walking the refused backlog
# examines thousands.
MAX_ROWS_EXAMINED = 100


def load(db: Db, schema: str) -> None:
    job = sql.Identifier(schema, "job")
    with db.transaction():
        insert_pending(db, schema, QUEUE, REFUSED, 5, preferred_instance_key_pattern="^gpu-")
        for pattern in ("^cpu-", "^new-"):
            insert_pending(db, schema, QUEUE, 1, 3, preferred_instance_key_pattern=pattern)
        insert_pending(db, schema, QUEUE, 50, 0)
    db.execute(sql.SQL("VACUUM (ANALYZE) {}").format(job))


def claim(db: Db, schema: str, *, matching: Sequence[str], refused: Sequence[str]) -> Any:
    query = queries_for(schema)(
        "claim", queues=[QUEUE], slots=[SLOTS], lease_seconds=[60],
        worker_id=str(uuid.uuid4()), matching_patterns=list(matching),
        refused_patterns=list(refused))
    (result,) = explain(db, query, fmt="JSON")
    return result["Plan"]


def claimed_statuses(db: Db, schema: str, *, matching: Sequence[str],
                     refused: Sequence[str]) -> list[tuple[str, str | None]]:
    query = queries_for(schema)(
        "claim", queues=[QUEUE], slots=[SLOTS], lease_seconds=[60],
        worker_id=str(uuid.uuid4()), matching_patterns=list(matching),
        refused_patterns=list(refused))
    with db.transaction(force_rollback=True):
        rows = db.execute(query.sql, dict(query.params)).fetchall()
    return sorted((row[2], row[3] if row[2] == "unjudged" else None) for row in rows)


def test_a_refused_backlog_ahead_is_not_read_by_the_claim(db: Db, schema: str) -> None:
    load(db, schema)
    root = claim(db, schema, matching=["^cpu-"], refused=["^gpu-", "^new-"])
    examined = rows_examined(root)
    assert examined <= MAX_ROWS_EXAMINED, (
        f"{examined} rows examined for a claim of {SLOTS}:\n{json.dumps(root, indent=1)}")
    # The matching job (priority 3) and 9 plain ones; nothing refused, nothing to judge.
    assert claimed_statuses(db, schema, matching=["^cpu-"], refused=["^gpu-", "^new-"]) \
        == [("active", None)] * SLOTS


def test_unjudged_patterns_are_reported_once_each_without_taking_a_slot(
    db: Db, schema: str,
) -> None:
    load(db, schema)
    statuses = claimed_statuses(db, schema, matching=[], refused=["^gpu-"])
    assert statuses == [("active", None)] * SLOTS + [("unjudged", "^cpu-"),
                                                     ("unjudged", "^new-")]
    root = claim(db, schema, matching=[], refused=["^gpu-"])
    assert rows_examined(root) <= MAX_ROWS_EXAMINED
