"""A chain thousands of jobs deep whose head ends without completing: every
job of it ends cancelled, naming the job before it, in the statement that
ended the head (failed through a pull consumer, cancelled, expired), without
hitting max_stack_depth (migration 0011 settles a cascade in a loop, where
0010 nested a trigger per job); retrying the head re-arms the whole chain,
the same way. Also: a job with dependents, released in the same statement as
another one completes, settles both batches."""

from __future__ import annotations

import itertools
import time
from typing import Any

import psycopg
import pytest
from psycopg import sql

from portqueue import PortQueue
from portqueue.maintenance.expirer import Expirer
from tests.support.rows import update_job
from tests.support.services import run_once

Db = psycopg.Connection[Any]

DEPTH = 5_000
# 0010 failed at a few hundred; adding a 5,000-job flow takes most of a
# test's time, so the other ways to end a head take a shorter chain.
SHORTER = 1_000
# Generous for a loaded 2-core machine: a cascade costs a few statements per
# job of the chain, about a second here. Unbounded (a statement per job per
# level, or nesting) would not finish the chain in this time.
BUDGET_SECONDS = 60


def chain(client: PortQueue, depth: int = DEPTH, **head_options: Any) -> list[str]:
    """A flow of ``depth`` jobs, each depending on the one before; their ids in order."""
    flow = client.add_flow(jobs=[
        {"key": "s0", "queue": "chain-head", "data": 0, **head_options},
        *({"key": f"s{n}", "queue": "chain", "data": n, "depends_on": [f"s{n - 1}"]}
          for n in range(1, depth))])
    return [str(flow.jobs[f"s{n}"].job_id) for n in range(depth)]


def statuses(db: Db, schema: str, ids: list[str]) -> dict[str, int]:
    """How many of ``ids`` but the first (the head) have each status."""
    rows = db.execute(sql.SQL("SELECT status::text, count(*) FROM {} "
                              "WHERE id = ANY(%s::uuid[]) GROUP BY 1").format(
        sql.Identifier(schema, "job")), [ids[1:]]).fetchall()
    return dict(rows)


def assert_cancelled_in_turn(db: Db, schema: str, ids: list[str], head_outcome: str) -> None:
    assert statuses(db, schema, ids) == {"cancelled": len(ids) - 1}
    rows = dict(db.execute(sql.SQL("SELECT id::text, error FROM {} WHERE id = ANY(%s::uuid[])")
                           .format(sql.Identifier(schema, "job")), [ids]).fetchall())
    assert rows[ids[1]] == f"dependency {ids[0]} ended {head_outcome}"
    for before, after in itertools.pairwise(ids[1:]):
        assert rows[after] == f"dependency {before} ended cancelled"


def test_a_failed_head_cancels_a_chain_thousands_deep(
    client: PortQueue, db: Db, schema: str
) -> None:
    ids = chain(client)
    (head,) = client.fetch_jobs(queue="chain-head", limit=1)
    started = time.monotonic()
    assert client.fail_job(job_id=head.job_id, lease_token=head.lease_token, error="boom",
                           retry=False)
    assert time.monotonic() - started < BUDGET_SECONDS
    assert_cancelled_in_turn(db, schema, ids, "failed")


def test_a_cancelled_head_cancels_a_chain_thousands_deep(
    client: PortQueue, db: Db, schema: str
) -> None:
    ids = chain(client, SHORTER)
    started = time.monotonic()
    assert client.cancel_job(job_id=ids[0]).outcome.value == "cancelled"
    assert time.monotonic() - started < BUDGET_SECONDS
    assert_cancelled_in_turn(db, schema, ids, "cancelled")


def test_an_expired_head_cancels_a_chain_thousands_deep(
    client: PortQueue, db: Db, schema: str, pg_dsn: str
) -> None:
    ids = chain(client, SHORTER, expire_in_seconds=60)
    update_job(db, schema, ids[0], "expire_at = now() - interval '1 second'")
    started = time.monotonic()
    assert run_once(Expirer, pg_dsn, schema)[1] == 1
    assert time.monotonic() - started < BUDGET_SECONDS
    assert_cancelled_in_turn(db, schema, ids, "expired")


def test_retrying_the_head_rearms_a_chain_thousands_deep(
    client: PortQueue, db: Db, schema: str
) -> None:
    ids = chain(client, SHORTER)
    client.cancel_job(job_id=ids[0])
    started = time.monotonic()
    assert client.retry_job(job_id=ids[0]) is not None
    assert time.monotonic() - started < BUDGET_SECONDS
    assert statuses(db, schema, ids) == {"waiting": len(ids) - 1}
    (head,) = client.fetch_jobs(queue="chain-head", limit=1)
    assert client.complete_job(job_id=head.job_id, lease_token=head.lease_token, output=1)
    assert statuses(db, schema, ids) == {"pending": 1, "waiting": len(ids) - 2}


@pytest.mark.parametrize("outcome", ["completed", "failed"])
def test_one_statement_settles_the_dependents_of_every_job_it_finishes(
    client: PortQueue, db: Db, schema: str, outcome: str
) -> None:
    parents = [r.job_id for r in client.add_jobs(queue="p", jobs=[{"data": n} for n in range(50)])]
    kids = [r.job_id for r in client.add_jobs(
        queue="k", jobs=[{"data": n, "depends_on": [p]} for n, p in enumerate(parents)])]
    both = client.add_job(queue="k", data="both", depends_on=parents[:2])  # type: ignore[arg-type]
    db.execute(sql.SQL("UPDATE {} SET status = %s, finished_at = now() "
                       "WHERE id = ANY(%s::uuid[])").format(sql.Identifier(schema, "job")),
               [outcome, parents])
    expected = "pending" if outcome == "completed" else "cancelled"
    assert statuses(db, schema, ["", *kids, str(both.job_id)]) == {expected: len(kids) + 1}
