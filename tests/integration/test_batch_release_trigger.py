"""Migration 0016: a batched completion (complete_jobs) that released its
jobs' dependents itself turns dependents_released on, and the row trigger
settle_dependents does not run for those jobs (nor for a claim, which it has
nothing to do for); it still runs, and releases
what the batch could not see, for a job with a dependent of several jobs and
for a job whose dependent was added while the completion waited for the
add's lock, including when the job had dependents already (the add then
writes the job's row all the same, so the completion sees a newer version
than its snapshot read)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import psycopg

from portqueue import PortQueue
from portqueue import worker_operations as ops
from portqueue.queries import queries_for
from portqueue.tx import from_psycopg
from tests.integration.test_batch_release import claim, completion, status
from tests.support.activity import waiting_on_locks
from tests.support.rows import job_row
from tests.support.waiting import in_background, wait_until

Db = psycopg.Connection[Any]


def trigger_calls(db: Db, schema: str, statement: str, params: dict[str, Any]) -> int:
    """Run ``statement`` (committed) and count the calls of settle_dependents
    it made (the function statistics of its transaction)."""
    with db.transaction():
        db.execute("SET LOCAL track_functions = 'all'")
        db.execute(statement, params)
        row = db.execute(
            "SELECT coalesce(sum(calls), 0) FROM pg_stat_xact_user_functions "
            "WHERE schemaname = %s AND funcname = 'settle_dependents'", [schema]).fetchone()
    assert row is not None
    return int(row[0])


def trigger_calls_of_completion(db: Db, schema: str, rows: list[dict[str, Any]]) -> int:
    query = completion(schema, rows)
    return trigger_calls(db, schema, query.sql, dict(query.params))


def test_claiming_a_job_with_dependents_runs_no_row_trigger(
    pq: PortQueue, db: Db, schema: str
) -> None:
    (parent,) = pq.add_jobs(queue="parents", jobs=[{"data": 0}])
    pq.add_job(queue="children", data=1, depends_on=[parent.job_id])  # type: ignore[list-item]
    query = queries_for(schema)(
        "claim", queues=["parents"], slots=[1], lease_seconds=[60], matching_patterns=[],
        refused_patterns=[], worker_id=str(uuid.uuid4()))
    assert trigger_calls(db, schema, query.sql, dict(query.params)) == 0
    assert status(db, schema, str(parent.job_id)) == "active"


def test_a_batch_that_released_every_dependent_runs_no_row_trigger(
    pq: PortQueue, db: Db, schema: str
) -> None:
    parents = pq.add_jobs(queue="parents", jobs=[{"data": n} for n in range(5)])
    children = pq.add_jobs(queue="children", jobs=[
        {"data": n, "depends_on": [p.job_id]} for n, p in enumerate(parents)])
    rows = claim(db, schema, "parents", 5)

    assert trigger_calls_of_completion(db, schema, rows) == 0
    assert {status(db, schema, str(c.job_id)) for c in children} == {"pending"}
    assert {job_row(db, schema, str(p.job_id))["dependents_released"] for p in parents} == {True}


def test_a_job_with_a_dependent_of_several_jobs_still_runs_it(
    pq: PortQueue, db: Db, schema: str
) -> None:
    a, b = pq.add_jobs(queue="parents", jobs=[{"data": 1}, {"data": 2}])
    only = pq.add_job(queue="children", data="a", depends_on=[a.job_id])  # type: ignore[list-item]
    both = pq.add_job(queue="children", data="ab", depends_on=[a.job_id, b.job_id])  # type: ignore[list-item]
    rows = claim(db, schema, "parents", 2)

    assert trigger_calls_of_completion(db, schema, rows) == 2
    assert status(db, schema, str(only.job_id)) == "pending"
    assert status(db, schema, str(both.job_id)) == "pending"
    assert job_row(db, schema, str(a.job_id))["dependents_released"] is False


def test_a_cancelled_completion_and_a_later_status_change_still_run_it(
    pq: PortQueue, db: Db, schema: str
) -> None:
    (parent,) = pq.add_jobs(queue="parents", jobs=[{"data": 0}])
    child = pq.add_job(queue="children", data=1, depends_on=[parent.job_id])  # type: ignore[list-item]
    (row,) = claim(db, schema, "parents", 1)
    jobs = [{"id": str(row["id"]), "lease_token": row["lease_token"], "status": "cancelled",
             "output": None}]
    query = ops.complete_jobs(queries_for(schema), [json.dumps(job) for job in jobs])
    db.execute(query.sql, dict(query.params))
    assert status(db, schema, str(child.job_id)) == "cancelled"
    assert job_row(db, schema, str(parent.job_id))["dependents_released"] is False


def race(pq: PortQueue, db: Db, schema: str, pg_dsn: str, parent_id: str) -> str:
    """A dependent of ``parent_id`` (claimed, active) added in a transaction
    that commits while complete_jobs, its snapshot taken, waits for the add's
    lock on the parent. Returns the dependent's id."""
    (row,) = claim(db, schema, "parents", 1)
    assert str(row["id"]) == parent_id
    query = completion(schema, [row])
    with psycopg.connect(pg_dsn, application_name="release-flag-adder") as adder, \
            psycopg.connect(pg_dsn, application_name="release-flag-completer",
                            autocommit=True) as completer:
        child = pq.add_job(queue="children", data="late", depends_on=[parent_id],
                           tx=from_psycopg(adder))
        assert child.job_id is not None
        done: list[Any] = []
        thread = in_background(lambda: done.append(
            completer.execute(query.sql, dict(query.params)).fetchone()))
        wait_until(lambda: waiting_on_locks(db, "release-flag-completer") == 1,
                   what="the completion to wait for the add's lock")
        adder.commit()
        thread.join(10)
        assert done == [([parent_id],)]
    return child.job_id


def test_a_dependent_added_during_the_completion_of_a_job_with_dependents_is_released(
    pq: PortQueue, db: Db, schema: str, pg_dsn: str
) -> None:
    (parent,) = pq.add_jobs(queue="parents", jobs=[{"data": 0}])
    assert parent.job_id is not None
    early = pq.add_job(queue="children", data="early", depends_on=[parent.job_id])
    assert job_row(db, schema, parent.job_id)["has_dependents"] is True

    late = race(pq, db, schema, pg_dsn, parent.job_id)

    assert status(db, schema, str(early.job_id)) == "pending"  # by the batch
    assert status(db, schema, late) == "pending"  # by the row trigger
    assert job_row(db, schema, parent.job_id)["dependents_released"] is False


def test_a_first_dependent_added_during_the_completion_is_released(
    pq: PortQueue, db: Db, schema: str, pg_dsn: str
) -> None:
    (parent,) = pq.add_jobs(queue="parents", jobs=[{"data": 0}])
    assert parent.job_id is not None

    late = race(pq, db, schema, pg_dsn, parent.job_id)

    assert status(db, schema, late) == "pending"
    assert job_row(db, schema, parent.job_id)["dependents_released"] is False



def test_a_dependent_added_in_the_completing_transaction_is_released(
    pq: PortQueue, db: Db, schema: str, pg_dsn: str
) -> None:
    # A handler that adds a dependent of its own job in job.transaction(),
    # which the completion then commits: the add is the completion's own
    # earlier write, which its snapshot sees.
    (parent,) = pq.add_jobs(queue="parents", jobs=[{"data": 0}])
    assert parent.job_id is not None
    (row,) = claim(db, schema, "parents", 1)
    query = completion(schema, [row])
    with psycopg.connect(pg_dsn) as handler:
        child = pq.add_job(queue="children", data="own", depends_on=[parent.job_id],
                           tx=from_psycopg(handler))
        assert child.status.value == "waiting"
        assert handler.execute(query.sql, dict(query.params)).fetchone() == ([parent.job_id],)
        handler.commit()
    assert status(db, schema, str(child.job_id)) == "pending"
