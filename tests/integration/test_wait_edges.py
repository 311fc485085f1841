"""SPEC §3.4 at its edges (issue 16, item 7): what a wait does when the job
moves on between its finish notification and the read that follows.

- deleted (removed by hand, or pruned past the pruner's grace): the named
  ``JobDeletedError``, on both clients and with ``poll_only``;
- retried (finished, then put back to pending): the wait goes on and returns
  the snapshot of the next finish;
- retention 0: the pruner keeps a job a waiter asked to be told of for a
  grace after it finished, so the wait reads its result; and
  ``add_job_and_wait`` commits its job already watched, so no worker and no
  pruner gets to it before the watch.

Each race is made certain rather than hoped for: the test's own transaction
finishes the job (which sends the notification at commit) and, in the same
transaction, deletes or re-arms it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from portqueue import AsyncPortQueue, JobDeletedError, JobStatus, PortQueue
from portqueue.maintenance.pruner import Pruner
from tests.support.rows import update_job
from tests.support.services import run_once
from tests.support.waiting import in_background, wait_until
from tests.support.workers import SyncHarness, row_where

Db = psycopg.Connection[Any]

FINISH = "status = 'completed', finished_at = now(), output = '\"first\"'"
REARM = "status = 'pending', finished_at = NULL, output = NULL"
FINISH_AGAIN = "status = 'completed', finished_at = now(), output = '\"second\"'"


@pytest.fixture
def other_db(db: Db) -> Iterator[Db]:
    """A connection for the background thread that moves the job on."""
    with psycopg.connect(db.info.dsn, autocommit=True) as conn:
        yield conn


def watched(db: Db, schema: str, job_id: str) -> None:
    wait_until(lambda: row_where(db, schema, job_id, "notify_finished"),
               what="the waiter to subscribe")


def finish_and_delete(db: Db, schema: str, job_id: str) -> None:
    watched(db, schema, job_id)
    with db.transaction():
        update_job(db, schema, job_id, FINISH)
        db.execute(sql.SQL("DELETE FROM {} WHERE id = %s").format(
            sql.Identifier(schema, "job")), [job_id])


def waiter_has_read(db: Db) -> bool:
    """The waiter's last statement is its read of the row (jobs_by_id), done."""
    row = db.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
        "AND application_name = 'portqueue:waiter' AND state = 'idle' "
        "AND query LIKE '%%id = ANY(%%'").fetchone()
    return row is not None and row[0] == 1


def finish_rearm_then_finish(db: Db, schema: str, job_id: str) -> None:
    watched(db, schema, job_id)
    with db.transaction():
        update_job(db, schema, job_id, FINISH)
        update_job(db, schema, job_id, REARM)  # what retry_job does to a finished job
    wait_until(lambda: waiter_has_read(db), what="the waiter to read the re-armed job")
    update_job(db, schema, job_id, FINISH_AGAIN)


# --- deleted between the finish and the read ---


def test_a_job_deleted_after_its_finish_raises_job_deleted(
    pq: PortQueue, other_db: Db, schema: str
) -> None:
    job_id = pq.add_job(queue="nobody-works-here", data={}).job_id
    assert job_id
    thread = in_background(lambda: finish_and_delete(other_db, schema, job_id))
    with pytest.raises(JobDeletedError) as raised:
        pq.wait_for_job(job_id=job_id, timeout_seconds=20)
    thread.join(5)
    assert raised.value.job_id == job_id
    assert job_id in str(raised.value)


def test_a_poll_only_wait_for_a_deleted_job_raises_job_deleted(
    pg_dsn: str, other_db: Db, schema: str
) -> None:
    with PortQueue(pg_dsn, schema=schema, poll_only=True) as pq:
        job_id = pq.add_job(queue="nobody-works-here", data={}).job_id
        assert job_id
        thread = in_background(lambda: finish_and_delete(other_db, schema, job_id))
        with pytest.raises(JobDeletedError):
            pq.wait_for_job(job_id=job_id, timeout_seconds=20)
        thread.join(5)


async def test_the_async_wait_for_a_deleted_job_raises_job_deleted(
    apq_factory: Callable[..., AsyncPortQueue], other_db: Db, schema: str
) -> None:
    async with apq_factory() as apq:
        job_id = (await apq.add_job(queue="nobody-works-here", data={})).job_id
        assert job_id
        thread = in_background(lambda: finish_and_delete(other_db, schema, job_id))
        with pytest.raises(JobDeletedError):
            await apq.wait_for_job(job_id=job_id, timeout_seconds=20)
        thread.join(5)


# --- retried between the finish and the read ---


def test_a_job_retried_after_its_finish_is_waited_for_again(
    pq: PortQueue, other_db: Db, schema: str
) -> None:
    job_id = pq.add_job(queue="nobody-works-here", data={}).job_id
    assert job_id
    thread = in_background(lambda: finish_rearm_then_finish(other_db, schema, job_id))
    snapshot = pq.wait_for_job(job_id=job_id, timeout_seconds=20)
    thread.join(5)
    assert snapshot.status is JobStatus.COMPLETED and snapshot.output == "second"


async def test_the_async_wait_for_a_retried_job_returns_its_next_finish(
    apq_factory: Callable[..., AsyncPortQueue], other_db: Db, schema: str
) -> None:
    async with apq_factory() as apq:
        job_id = (await apq.add_job(queue="nobody-works-here", data={})).job_id
        assert job_id
        thread = in_background(lambda: finish_rearm_then_finish(other_db, schema, job_id))
        snapshot = await apq.wait_for_job(job_id=job_id, timeout_seconds=20)
        thread.join(5)
    assert snapshot.status is JobStatus.COMPLETED and snapshot.output == "second"


def test_a_retried_job_that_does_not_finish_again_times_out(
    pq: PortQueue, other_db: Db, schema: str
) -> None:
    job_id = pq.add_job(queue="nobody-works-here", data={}).job_id
    assert job_id

    def finish_and_rearm() -> None:
        watched(other_db, schema, job_id)
        with other_db.transaction():
            update_job(other_db, schema, job_id, FINISH)
            update_job(other_db, schema, job_id, REARM)

    thread = in_background(finish_and_rearm)
    with pytest.raises(TimeoutError):
        pq.wait_for_job(job_id=job_id, timeout_seconds=2)
    thread.join(5)


# --- retention 0: the pruner leaves the waiter its read ---


class NoGracePruner(Pruner):
    waited_grace_seconds = 0.0


def test_the_pruner_keeps_a_waited_for_job_with_ttl_zero_for_its_grace(
    pq: PortQueue, db: Db, pg_dsn: str, schema: str
) -> None:
    waited = pq.add_job(queue="q", data={}, retention={"ttl_seconds": 0}).job_id
    plain = pq.add_job(queue="q", data={}, retention={"ttl_seconds": 0}).job_id
    assert waited and plain
    # what wait_for_job's watch does, then both finish
    update_job(db, schema, waited, "notify_finished = true")
    for job_id in (waited, plain):
        update_job(db, schema, job_id, FINISH)

    assert run_once(Pruner, pg_dsn, schema)[1] == 1
    assert pq.get_job(job_id=plain) is None
    snapshot = pq.get_job(job_id=waited)
    assert snapshot is not None and snapshot.output == "first", "kept for the waiter"
    # past the grace (here: none at all), the ttl applies as to any job
    assert run_once(NoGracePruner, pg_dsn, schema)[1] == 1
    assert pq.get_job(job_id=waited) is None


# --- add_job_and_wait: the job is never there unwatched ---

# Fires when the inserting transaction commits, and records whether the job
# is watched at that moment: if the add committed alone, a worker could finish
# it and the pruner (retention 0) delete it before the waiter's watch, which
# then found no job.
WATCHED_AT_COMMIT = ("""
CREATE TABLE {schema}.test_added (id uuid, watched boolean)""", """
CREATE FUNCTION {schema}.test_record_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {added} SELECT j.id, j.notify_finished FROM {job} AS j WHERE j.id = NEW.id;
    RETURN NULL;
END $$""", """
CREATE CONSTRAINT TRIGGER test_record_added AFTER INSERT ON {job}
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION {schema}.test_record_added()""")


def test_add_job_and_wait_commits_its_job_already_watched(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    names = {"schema": sql.Identifier(schema), "job": sql.Identifier(schema, "job"),
             "added": sql.Identifier(schema, "test_added")}
    for statement in WATCHED_AT_COMMIT:
        db.execute(sql.SQL(statement).format(**names))
    pq = harness.pq

    @pq.handler("render")
    def handler(job: Any) -> str:
        return "rendered"

    try:
        harness.start()
        output = pq.add_job_and_wait(queue="render", data={}, retention={"ttl_seconds": 0},
                                     timeout_seconds=20)
        rows = db.execute(sql.SQL("SELECT watched FROM {added}").format(**names)).fetchall()
    finally:
        db.execute(sql.SQL("DROP TRIGGER test_record_added ON {job}").format(**names))
        db.execute(sql.SQL("DROP FUNCTION {schema}.test_record_added()").format(**names))
        db.execute(sql.SQL("DROP TABLE {added}").format(**names))
    assert output == "rendered"
    assert rows == [(True,)], "the add committed before the job was watched"
