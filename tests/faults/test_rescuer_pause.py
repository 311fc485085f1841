"""The rescuer paused mid-pass (scenario 5): inside its one statement, after
it has selected its candidates and before it has locked the next one (a
test trigger holds the update of the first), and at the two points between
statements, ``rescuer.before_batch`` (its transaction open and lock held,
its ``now()`` already fixed, the statement not yet run) and
``rescuer.after_batch`` (the statement has rescued rows, not yet committed).

While it is paused, the job's owner completes it (the statement a worker's
``job.transaction()`` runs, with its side effect), or releases it and
another worker claims it. The rescuer is the real ``Rescuer`` service; the
workers' writes are the library's own statements, so the interleaving is
exact instead of hoped for.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg_pool import AsyncConnectionPool

from portqueue import PortQueue, _testing
from portqueue import worker_operations as ops
from portqueue.driver import execute_sync
from portqueue.maintenance.rescuer import Rescuer
from portqueue.settings import Settings
from tests.faults.harness import assert_nothing_lost, job
from tests.support.waiting import wait_until_async

pytestmark = pytest.mark.slow

ZOMBIE = "faults:zombie"


class PausedRescuer:
    """A ``Rescuer.run_once()`` task parked at one checkpoint until ``resume()``."""

    def __init__(self, settings: Settings, pool: AsyncConnectionPool, point: str) -> None:
        self.point = f"rescuer.{point}"
        self.paused = asyncio.Event()
        self._resume = asyncio.Event()
        _testing.install_hook(self.point, self._hook)
        self.task = asyncio.ensure_future(Rescuer(settings, pool).run_once())

    async def _hook(self) -> None:
        self.paused.set()
        await self._resume.wait()

    async def wait_paused(self) -> None:
        await asyncio.wait_for(self.paused.wait(), 10)

    async def resume(self) -> int:
        _testing.remove_hook(self.point)
        self._resume.set()
        return await asyncio.wait_for(self.task, 10)


@pytest.fixture
async def rescuer_pool(pq: PortQueue) -> AsyncIterator[AsyncConnectionPool]:
    settings = pq._settings
    # The plan a rescue has on a real table: a nested loop that locks and
    # updates one candidate at a time. On a table of a few rows the planner
    # may hash the candidates first (locking them all before updating any),
    # which would make the "inside its statement" window depend on the plan.
    kwargs = {**settings.connection_kwargs("maintenance"),
              "options": "-c enable_hashjoin=off -c enable_mergejoin=off"}
    async with AsyncConnectionPool(settings.dsn, min_size=1, max_size=1, open=False,
                                   kwargs=kwargs) as pool:
        yield pool
    for point in ("before_batch", "after_batch"):
        _testing.remove_hook(f"rescuer.{point}")


def lapsed_job(pq: PortQueue, db: psycopg.Connection[Any], schema: str) -> str:
    """A job on attempt 1 of 3 whose worker stopped heartbeating a second ago."""
    job_id = pq.add_job(queue="rescue", data={}, retry={"max_attempts": 3}).job_id
    assert job_id is not None
    db.execute(sql.SQL("""
        UPDATE {} SET status = 'active', attempt = 1, lease_token = 1, started_at = now(),
               lease_expires_at = now() - interval '1 second', worker_id = gen_random_uuid()
        WHERE id = %s""").format(sql.Identifier(schema, "job")), [job_id])
    return job_id


def write_effect_and_complete(pq: PortQueue, conn: psycopg.Connection[Any], job_id: str) -> int:
    """What the owner's ``job.transaction()`` runs before committing: its side
    effect, then the fenced completion (attempt 1, token 1). Rows completed."""
    conn.execute("INSERT INTO faults.effect (job_id, attempt, pid) VALUES (%s, 1, %s)",
                 [job_id, os.getpid()])
    (row,) = execute_sync(conn, ops.complete_jobs(pq._settings.queries, [json.dumps({
        "id": job_id, "lease_token": 1, "status": "completed",
        "output": {"pid": os.getpid(), "attempt": 1}, "progress": None, "attrs": None})]))
    return len(row["ids"])


def complete_in_job_transaction(pq: PortQueue, dsn: str, job_id: str) -> int:
    """The owner's whole ``job.transaction()``: committed only if the
    completion matched. Rows completed (0: fenced out)."""
    with psycopg.connect(make_conninfo(dsn, application_name=ZOMBIE)) as conn:
        completed = write_effect_and_complete(pq, conn, job_id)
        (conn.commit if completed else conn.rollback)()
    return completed


def claim(pq: PortQueue, db: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    return execute_sync(db, pq._settings.queries(
        "claim", queues=["rescue"], slots=[1], lease_seconds=[60], matching_patterns=[],
        refused_patterns=[], worker_id=str(uuid.uuid4())))


@pytest.mark.parametrize("meanwhile", ["completed", "released-and-reclaimed"])
async def test_rescuer_paused_before_its_batch_leaves_a_job_finished_or_reclaimed_meanwhile(
    meanwhile: str, pq: PortQueue, pg_dsn: str, ledger_db: psycopg.Connection[Any],
    schema: str, rescuer_pool: AsyncConnectionPool, report: Any,
) -> None:
    db = ledger_db
    job_id = lapsed_job(pq, db, schema)
    rescuer = PausedRescuer(pq._settings, rescuer_pool, "before_batch")
    await rescuer.wait_paused()

    if meanwhile == "completed":
        # The owner was slow, not dead: it finishes past its lease.
        assert await asyncio.to_thread(complete_in_job_transaction, pq, pg_dsn, job_id) == 1
    else:
        # The owner aborts (its job back to pending, attempt unspent) and
        # another worker claims the job, with a fresh lease and token.
        released = execute_sync(db, pq._settings.queries(
            "release_jobs", jobs=json.dumps([{"id": job_id, "lease_token": 1}])))
        assert len(released) == 1
        assert len(claim(pq, db)) == 1
    before = job(db, schema, job_id)

    assert await rescuer.resume() == 0
    after = job(db, schema, job_id)
    assert after == before, "the rescuer touched a row that no longer needed it"
    assert after["errors"] == []
    if meanwhile == "completed":
        assert (after["status"], after["output"]) == (
            "completed", {"pid": os.getpid(), "attempt": 1})
    else:
        assert (after["status"], after["attempt"], after["lease_token"]) == ("active", 1, 2)
    figures = assert_nothing_lost(db, schema, [job_id])
    report(figures, faults=f"rescuer paused before its batch; job {meanwhile}", rescued=0)


async def test_rescuer_paused_after_its_batch_fences_out_the_owner_and_claimers_skip(
    pq: PortQueue, pg_dsn: str, ledger_db: psycopg.Connection[Any], schema: str,
    rescuer_pool: AsyncConnectionPool, report: Any,
) -> None:
    """The other order: the rescuer's statement has rescued the job and holds
    its row. A claimer skips it (never waits on the rescuer); the owner's
    late completion waits for the row, then finds it rescued and is refused,
    its side effect rolled back with it. Then the job is claimed anew."""
    db = ledger_db
    job_id = lapsed_job(pq, db, schema)
    rescuer = PausedRescuer(pq._settings, rescuer_pool, "after_batch")
    await rescuer.wait_paused()

    assert claim(pq, db) == [], "a claimer took a row the rescuer holds"
    completing = asyncio.ensure_future(
        asyncio.to_thread(complete_in_job_transaction, pq, pg_dsn, job_id))

    def completion_waits_on_the_row() -> bool:
        row = db.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
                         "AND wait_event_type = 'Lock'", [ZOMBIE]).fetchone()
        return row is not None and row[0] == 1

    await wait_until_async(completion_waits_on_the_row, 10, "the owner's completion to wait")
    assert not completing.done()
    assert await rescuer.resume() == 1
    assert await asyncio.wait_for(completing, 10) == 0, "the late completion was accepted"

    rescued = job(db, schema, job_id)
    assert (rescued["status"], rescued["attempt"], rescued["output"]) == ("pending", 1, None)
    assert [(e["type"], e["attempt"]) for e in rescued["errors"]] == [("LeaseExpired", 1)]
    (reclaimed,) = claim(pq, db)
    assert (reclaimed["attempt"], reclaimed["lease_token"]) == (2, 2)
    figures = assert_nothing_lost(db, schema, [job_id], faulted=[job_id])
    assert figures.effects == 0
    report(figures, faults="rescuer paused after its batch; owner completes late",
           rescued=1, fenced_completions=1)


async def test_a_completion_in_flight_while_the_rescuer_runs_is_passed_over(
    pq: PortQueue, pg_dsn: str, ledger_db: psycopg.Connection[Any], schema: str,
    rescuer_pool: AsyncConnectionPool, report: Any,
) -> None:
    """The mirror of the case above: the owner's ``job.transaction()`` has run
    its completion (the row is locked) but not committed when a whole rescuer
    pass runs. The pass neither waits for it nor takes the job (SKIP LOCKED),
    and the completion then commits."""
    db = ledger_db
    job_id = lapsed_job(pq, db, schema)
    with psycopg.connect(pg_dsn) as owner:
        assert write_effect_and_complete(pq, owner, job_id) == 1
        rescued = await asyncio.wait_for(Rescuer(pq._settings, rescuer_pool).run_once(), 10)
        owner.commit()
    assert rescued == 0
    row = job(db, schema, job_id)
    assert (row["status"], row["errors"]) == ("completed", [])
    figures = assert_nothing_lost(db, schema, [job_id])
    report(figures, faults="rescuer pass during an uncommitted completion", rescued=0)


PAUSE_LOCK = 7051


@pytest.fixture
def pause_trigger(ledger_db: psycopg.Connection[Any], schema: str) -> Iterator[None]:
    """A test trigger on the job table: an UPDATE that changes the status of a
    job whose data says ``pause_rescue`` waits on advisory lock PAUSE_LOCK."""
    function = sql.Identifier(schema, "test_pause_rescue")
    table = sql.Identifier(schema, "job")
    ledger_db.execute(sql.SQL("""
        CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF OLD.data ->> 'pause_rescue' = 'yes' AND NEW.status <> OLD.status THEN
                PERFORM pg_advisory_xact_lock_shared({lock});
            END IF;
            RETURN NEW;
        END $$""").format(function=function, lock=sql.Literal(PAUSE_LOCK)))
    ledger_db.execute(sql.SQL("CREATE TRIGGER test_pause_rescue BEFORE UPDATE ON {} "
                              "FOR EACH ROW EXECUTE FUNCTION {}()").format(table, function))
    try:
        yield
    finally:
        ledger_db.execute("SELECT pg_advisory_unlock_all()")
        ledger_db.execute(sql.SQL("DROP TRIGGER IF EXISTS test_pause_rescue ON {}").format(table))
        ledger_db.execute(sql.SQL("DROP FUNCTION IF EXISTS {}()").format(function))


def rescuer_waiting_on_the_trigger(db: psycopg.Connection[Any]) -> bool:
    row = db.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                     "AND application_name LIKE '%%:maintenance' AND wait_event = 'advisory'"
                     ).fetchone()
    return row is not None and row[0] == 1


@pytest.mark.parametrize("meanwhile", ["completed", "released-and-reclaimed"])
async def test_rescuer_paused_inside_its_statement_leaves_a_selected_job_finished_meanwhile(
    meanwhile: str, pq: PortQueue, pg_dsn: str, ledger_db: psycopg.Connection[Any],
    schema: str, rescuer_pool: AsyncConnectionPool, pause_trigger: None, report: Any,
) -> None:
    """The window inside the one statement: two lapsed jobs, both selected by
    its snapshot (sorted by id), locked and rescued one at a time. The first
    one's update waits in a test trigger, so the rescuer has selected the
    second but not yet locked it. Meanwhile the second's owner completes it
    (or releases it and another worker claims it). Resumed, the rescuer
    re-checks the second row as it locks it and leaves it alone."""
    db = ledger_db
    first, second = sorted(lapsed_job(pq, db, schema) for _ in range(2))
    db.execute(sql.SQL("UPDATE {} SET data = '{{\"pause_rescue\": \"yes\"}}' WHERE id = %s")
               .format(sql.Identifier(schema, "job")), [first])
    db.execute("SELECT pg_advisory_lock(%s)", [PAUSE_LOCK])
    rescuing = asyncio.ensure_future(Rescuer(pq._settings, rescuer_pool).run_once())
    try:
        await paused_inside_the_statement(db, pq, pg_dsn, schema, meanwhile, first, second,
                                          rescuing, report)
    finally:
        # Whatever failed, let the rescuer's transaction end on this loop, or the
        # teardown's DROP TRIGGER would wait for its locks for ever.
        db.execute("SELECT pg_advisory_unlock_all()")
        with contextlib.suppress(Exception):
            await asyncio.wait_for(rescuing, 10)


async def paused_inside_the_statement(
    db: psycopg.Connection[Any], pq: PortQueue, pg_dsn: str, schema: str, meanwhile: str,
    first: str, second: str, rescuing: asyncio.Future[int], report: Any,
) -> None:
    await wait_until_async(lambda: rescuer_waiting_on_the_trigger(db), 10,
                           "the rescuer to stop inside its statement, at the first job")

    # Not blocked: the rescuer has selected the second job, not locked it (a
    # plan that locked every candidate first would make this wait, and fail).
    if meanwhile == "completed":
        completed = asyncio.to_thread(complete_in_job_transaction, pq, pg_dsn, second)
        assert await asyncio.wait_for(completed, 10) == 1
    else:
        released = execute_sync(db, pq._settings.queries(
            "release_jobs", jobs=json.dumps([{"id": second, "lease_token": 1}])))
        assert len(released) == 1
        (claimed,) = claim(pq, db)
        assert str(claimed["id"]) == second
    before = job(db, schema, second)
    db.execute("SELECT pg_advisory_unlock(%s)", [PAUSE_LOCK])
    assert await asyncio.wait_for(rescuing, 10) == 1, "only the first job needed rescuing"

    assert job(db, schema, second) == before, "the rescuer touched the second job"
    assert before["errors"] == []
    rescued = job(db, schema, first)
    assert [(e["type"], e["attempt"]) for e in rescued["errors"]] == [("LeaseExpired", 1)]
    assert rescued["status"] == "pending"
    figures = assert_nothing_lost(db, schema, [first, second], faulted=[first])
    report(figures, faults=f"rescuer paused inside its statement; second job {meanwhile}",
           rescued=1)
