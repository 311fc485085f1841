"""A worker's batched completion (complete_jobs) releases the dependents that
wait for one of its jobs alone in one UPDATE of its own, one probe of
job_waiting_on_idx for the batch; the row trigger settle_dependents still
runs after it and settles the rest: dependents of several jobs, and a
dependent whose add committed while the completion waited for its lock on
the dependency (after the statement's snapshot, so the batch UPDATE cannot
see it)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import psycopg
from psycopg.rows import dict_row

from portqueue import PortQueue
from portqueue import worker_operations as ops
from portqueue.queries import Query, queries_for
from portqueue.tx import from_psycopg
from tests.support.activity import waiting_on_locks
from tests.support.plans import plan_nodes
from tests.support.rows import job_row
from tests.support.waiting import in_background, wait_until

Db = psycopg.Connection[Any]
PARENTS = 10


def claim(db: Db, schema: str, queue: str, count: int) -> list[dict[str, Any]]:
    query = queries_for(schema)(
        "claim", queues=[queue], slots=[count], lease_seconds=[60], matching_patterns=[],
        refused_patterns=[], worker_id=str(uuid.uuid4()))
    with db.cursor(row_factory=dict_row) as cursor:
        return cursor.execute(query.sql, dict(query.params)).fetchall()


def completion(schema: str, rows: list[dict[str, Any]]) -> Query:
    jobs = [{"id": str(row["id"]), "lease_token": row["lease_token"], "status": "completed",
             "output": {"n": n}} for n, row in enumerate(rows)]
    return ops.complete_jobs(queries_for(schema), [json.dumps(job) for job in jobs])


def status(db: Db, schema: str, job_id: str) -> str:
    return str(job_row(db, schema, job_id)["status"])


def test_a_batch_releases_its_only_dependents_in_one_update(
    pq: PortQueue, db: Db, schema: str
) -> None:
    # Analysed before any dependent exists, as after a bulk load: the planner
    # then expects no waiting row, and must still probe the index.
    pq.add_jobs(queue="others", jobs=[{"data": n} for n in range(400)])
    db.execute(f'ANALYZE "{schema}".job')
    parents = pq.add_jobs(queue="parents", jobs=[{"data": n} for n in range(PARENTS)])
    only = pq.add_jobs(queue="children", jobs=[
        {"data": n, "depends_on": [p.job_id]} for n, p in enumerate(parents)])
    shared = pq.add_job(queue="children", data="all",
                        depends_on=[p.job_id for p in parents])  # type: ignore[misc]
    rows = claim(db, schema, "parents", PARENTS)
    assert len(rows) == PARENTS
    query = completion(schema, rows)

    statement = f"EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, FORMAT JSON) {query.sql}"
    with db.transaction(force_rollback=True):
        (plan,) = db.execute(statement, dict(query.params)).fetchone()  # type: ignore[misc]
    root = plan[0]["Plan"]
    (release,) = [n for n in plan_nodes(root)
                  if n["Node Type"] == "ModifyTable" and n["Alias"] == "c"]
    scanned = list(plan_nodes(release))
    assert "job_waiting_on_idx" in {n.get("Index Name") for n in scanned}, json.dumps(root)
    assert not [n for n in scanned if n["Node Type"] == "Seq Scan"], json.dumps(root)
    (found,) = [n for n in scanned if n.get("Alias") == "c" and "Scan" in n["Node Type"]]
    assert found["Actual Rows"] == PARENTS, "the batch UPDATE itself releases each one"

    (written,) = db.execute(query.sql, dict(query.params)).fetchone()  # type: ignore[misc]
    assert len(written) == PARENTS
    assert {status(db, schema, str(job.job_id)) for job in only} == {"pending"}
    assert status(db, schema, str(shared.job_id)) == "pending"  # by the row trigger


def test_a_dependent_added_while_the_completion_waits_is_released(
    pq: PortQueue, db: Db, schema: str, pg_dsn: str
) -> None:
    (parent,) = pq.add_jobs(queue="parents", jobs=[{"data": 0}])
    (row,) = claim(db, schema, "parents", 1)
    query = completion(schema, [row])
    with psycopg.connect(pg_dsn, application_name="batch-release-adder") as adder, \
            psycopg.connect(pg_dsn, application_name="batch-release-completer",
                            autocommit=True) as completer:
        child = pq.add_job(queue="children", data=1, depends_on=[parent.job_id],  # type: ignore[list-item]
                           tx=from_psycopg(adder))
        assert child.job_id is not None
        done: list[Any] = []
        thread = in_background(lambda: done.append(
            completer.execute(query.sql, dict(query.params)).fetchone()))
        # The completion has its snapshot and waits for the add's lock on the
        # dependency: the add commits after that snapshot was taken.
        wait_until(lambda: waiting_on_locks(db, "batch-release-completer") == 1,
                   what="the completion to wait for the add's lock")
        assert status(db, schema, str(parent.job_id)) == "active"
        adder.commit()
        thread.join(10)
        assert done == [([str(parent.job_id)],)]
    assert status(db, schema, str(child.job_id)) == "pending"


def test_a_batch_releases_nothing_for_a_job_it_does_not_complete(
    pq: PortQueue, db: Db, schema: str
) -> None:
    parents = pq.add_jobs(queue="parents", jobs=[{"data": n} for n in range(3)])
    children = pq.add_jobs(queue="children", jobs=[
        {"data": n, "depends_on": [p.job_id]} for n, p in enumerate(parents)])
    rows = {str(row["id"]): row for row in claim(db, schema, "parents", 3)}
    done, stopped, stale = (rows[str(p.job_id)] for p in parents)
    jobs = [{"id": str(done["id"]), "lease_token": done["lease_token"], "status": "completed",
             "output": None},
            # a handler that returned after its cancel signal
            {"id": str(stopped["id"]), "lease_token": stopped["lease_token"],
             "status": "cancelled", "output": None},
            # fenced out: an older attempt's token
            {"id": str(stale["id"]), "lease_token": stale["lease_token"] - 1,
             "status": "completed", "output": None}]
    query = ops.complete_jobs(queries_for(schema), [json.dumps(job) for job in jobs])
    (written,) = db.execute(query.sql, dict(query.params)).fetchone()  # type: ignore[misc]
    assert sorted(written) == sorted([str(done["id"]), str(stopped["id"])])
    assert [status(db, schema, str(c.job_id)) for c in children] == [
        "pending", "cancelled", "waiting"]
