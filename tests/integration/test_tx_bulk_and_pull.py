"""The ``tx=`` conformance suite's contract (tests/integration/test_tx_conformance.py)
for the methods of issue 21 that take ``tx=``: ``complete_job``, ``retry_jobs``,
``cancel_jobs`` and ``redrive`` join the caller's transaction, through every
adapter; what they write exists if and only if it commits, and portqueue
commits nothing of it."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg import sql

from portqueue import JobStatus
from tests.support.rows import set_dead_letter_queue
from tests.support.tx_adapters import CallerTransaction

QUEUE = "fulfillment"


def job_statuses(db: psycopg.Connection[Any], schema: str) -> dict[str, str]:
    rows = db.execute(sql.SQL("SELECT id::text, status::text FROM {}").format(
        sql.Identifier(schema, "job"))).fetchall()
    return dict(rows)


@pytest.mark.parametrize("ending", ["commit", "rollback"])
def test_the_bulk_and_pull_writes_join_the_callers_transaction(
    caller: CallerTransaction, db: psycopg.Connection[Any], schema: str, ending: str
) -> None:
    client, tx = caller.client, caller.tx
    set_dead_letter_queue(db, schema, QUEUE, f"{QUEUE}-dead")
    # The two to fetch first (priority), the other two left pending.
    to_retry, to_cancel, to_fetch, to_dead_letter = (
        client.add_job(queue=QUEUE, data={"n": n}, priority=priority).job_id
        for n, priority in enumerate((0, 0, 9, 8)))
    client.cancel_job(job_id=to_retry)
    fetched, doomed = client.fetch_jobs(queue=QUEUE, limit=2)
    assert (fetched.job_id, doomed.job_id) == (to_fetch, to_dead_letter)
    assert client.fail_job(job_id=doomed.job_id, lease_token=doomed.lease_token, error="x",
                           retry=False)
    before = job_statuses(db, schema)

    caller.begin()
    assert client.retry_jobs(job_ids=[to_retry], tx=tx) == 1
    assert client.cancel_jobs(queue=QUEUE, statuses=[JobStatus.PENDING], tx=tx).cancelled == 2
    assert client.complete_job(job_id=fetched.job_id, lease_token=fetched.lease_token,
                               output="shipped", tx=tx) is True
    assert client.redrive(queue=f"{QUEUE}-dead", tx=tx) == 1
    assert job_statuses(db, schema) == before, "nothing visible before the commit"
    assert caller.in_transaction()

    if ending == "rollback":
        caller.rollback()
        assert job_statuses(db, schema) == before
        return
    caller.commit()
    after = job_statuses(db, schema)
    # retry_jobs re-armed to_retry, then cancel_jobs (same transaction) cancelled it
    # with to_cancel; the redrive added one new pending job.
    assert {k: after[k] for k in (to_retry, to_cancel, to_fetch, to_dead_letter)} == {
        to_retry: "cancelled", to_cancel: "cancelled", to_fetch: "completed",
        to_dead_letter: "failed"}
    new = set(after) - set(before)
    assert [after[job_id] for job_id in new] == ["pending"]
    assert sorted(after[k] for k in set(before) - {to_retry, to_cancel, to_fetch,
                                                   to_dead_letter}) == ["completed"]
