"""claim_plain, the worker's lighter claim while no pending job names a pattern
or has a partition key: it claims what claim would, and claims nothing and
says so (one 'mixed' row) as soon as such a job is pending anywhere
(the worker's side: test_worker_claim_shape.py).

Checked by what the statements return, each in a rolled-back transaction, one
after the other on the same rows.
"""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest
from psycopg import sql

from portqueue import worker_operations as ops
from portqueue.queries import Query, queries_for
from tests.support.plans import plan_nodes
from tests.support.rows import insert_pending

Db = psycopg.Connection[Any]

QUEUES = {"a": 7, "b": 3}


def plain(schema: str) -> Query:
    return ops.claim_plain(queries_for(schema), slots=QUEUES,
                           lease_seconds=dict.fromkeys(QUEUES, 60), worker_id=str(uuid.uuid4()))


def full(schema: str) -> Query:
    return ops.claim(queries_for(schema), slots=QUEUES, lease_seconds=dict.fromkeys(QUEUES, 60),
                     matching_patterns=[], refused_patterns=[], worker_id=str(uuid.uuid4()))


def rolled_back(db: Db, query: Query) -> list[tuple[Any, ...]]:
    with db.transaction(force_rollback=True):
        return db.execute(query.sql, dict(query.params)).fetchall()


def claimed(rows: list[tuple[Any, ...]]) -> list[tuple[str, str]]:
    """(queue, id) of the jobs a claim started, in the order it returned them."""
    return sorted((row[1], row[0]) for row in rows if row[2] in ("active", "expired"))


def load(db: Db, schema: str) -> None:
    """Both queues: several priority levels, and jobs due later that no claim takes."""
    with db.transaction():
        for queue in QUEUES:
            for priority in (0, 5, 2):
                insert_pending(db, schema, queue, 4, priority)
            insert_pending(db, schema, queue, 3, 9)
        db.execute(sql.SQL("UPDATE {} SET start_after = now() + interval '1 hour' "
                           "WHERE priority = 9").format(sql.Identifier(schema, "job")))


def test_claim_plain_claims_what_claim_claims(db: Db, schema: str) -> None:
    load(db, schema)
    by_claim = claimed(rolled_back(db, full(schema)))
    rows = rolled_back(db, plain(schema))
    assert len(by_claim) == sum(QUEUES.values())
    assert claimed(rows) == by_claim
    assert [row for row in rows if row[2] not in ("active", "expired")] == []


@pytest.mark.parametrize("column", ["preferred_instance_key_pattern", "partition_key"])
def test_a_pending_patterned_or_keyed_job_anywhere_makes_it_claim_nothing(
        db: Db, schema: str, column: str) -> None:
    load(db, schema)
    with db.transaction():
        insert_pending(db, schema, "elsewhere", 1, 0, **{column: "^x"})
    rows = rolled_back(db, plain(schema))
    assert [row[2] for row in rows] == [ops.MIXED]
    # claim itself still claims the plain jobs (and would judge the pattern).
    assert len(claimed(rolled_back(db, full(schema)))) == sum(QUEUES.values())


def test_a_limited_queue_is_still_named(db: Db, schema: str) -> None:
    load(db, schema)
    db.execute(sql.SQL("INSERT INTO {} (name, global_concurrency) VALUES (%s, 2) "
                       "ON CONFLICT (name) DO UPDATE SET global_concurrency = 2").format(
        sql.Identifier(schema, "queue")), ["b"])
    rows = rolled_back(db, plain(schema))
    assert {(row[1], row[2]) for row in rows if row[1] == "b"} == {("b", ops.LIMITED)}
    assert len(claimed(rows)) == QUEUES["a"]


def test_its_plans_size_the_queues_alike_whatever_the_arrays_hold(db: Db, schema: str) -> None:
    """The plan cache keeps a prepared statement's generic plan only while its
    estimate is no worse than the custom plans'. Given as constants, the arrays
    let a custom plan count one queue where the generic plan counts ten, and
    in the bench's drain every claim was planned again (203 plans for 202
    claims, docs/performance.md): each plan must size the wanted queues the
    same for one queue as for thirty."""
    load(db, schema)

    def estimated(queues: list[str]) -> list[float]:
        query = ops.claim_plain(queries_for(schema), slots=dict.fromkeys(queues, 5),
                                lease_seconds=dict.fromkeys(queues, 60),
                                worker_id=str(uuid.uuid4()))
        row = db.execute(f"EXPLAIN (FORMAT JSON) {query.sql}", dict(query.params)).fetchone()
        assert row is not None
        return [node["Plan Rows"] for node in plan_nodes(row[0][0]["Plan"])
                if node["Node Type"] == "Function Scan"]

    one, thirty = estimated(["a"]), estimated([f"q{n}" for n in range(30)])
    assert one and one == thirty
