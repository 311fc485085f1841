"""Issue 5: the statements every job goes through cost what they touch.

A batched completion must find its rows through the primary key, however
many other jobs are running (or were completed and not yet vacuumed): it is
read with ``EXPLAIN (ANALYZE, BUFFERS)`` in a rolled-back transaction, with
the worker's own named query and the parameters a worker sends. A plain add
commits on its own, with no transaction left open on the pooled connection.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from portqueue import AsyncPortQueue, PauseMode, PortQueue, QueuePausedError, operations
from portqueue import worker_operations as ops
from portqueue.driver import execute_sync, fetch_async, run_sync
from portqueue.maintenance import maintenance_services
from portqueue.queries import Query, queries_for
from portqueue.types import AddJobResult
from portqueue.worker.state import Claimed
from tests.support.plans import claim_statement, plan_nodes
from tests.support.rows import count_jobs

Db = psycopg.Connection[Any]

RUNNING = 400
COMPLETED = 10
# Ten completions through the primary key: the key lookups, the heap pages
# and the index entries of the new row versions. A scan of the running
# jobs' lease index would grow with RUNNING instead.
MAX_BUFFERS_PER_JOB = 40


def claim_all(db: Db, schema: str, count: int) -> list[dict[str, Any]]:
    query = queries_for(schema)(
        "claim", queues=["hot"], slots=[count], lease_seconds=[60], matching_patterns=[],
        refused_patterns=[], worker_id=str(uuid.uuid4()))
    with db.cursor(row_factory=dict_row) as cursor:
        return cursor.execute(query.sql, dict(query.params)).fetchall()


def completion(schema: str, rows: list[dict[str, Any]]) -> Query:
    jobs = [{"id": str(row["id"]), "lease_token": row["lease_token"], "status": "completed",
             "output": None} for row in rows]
    return ops.complete_jobs(queries_for(schema), [json.dumps(job) for job in jobs])


def test_a_completion_is_pinned_to_the_primary_key(pq: PortQueue, db: Db, schema: str) -> None:
    pq.add_jobs(queue="hot", jobs=[{"data": {"n": n}} for n in range(RUNNING)])
    db.execute(f'ANALYZE "{schema}".job')  # as after a bulk load: no job is active yet
    rows = claim_all(db, schema, RUNNING)
    assert len(rows) == RUNNING

    query = completion(schema, rows[:COMPLETED])
    statement = f"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, FORMAT JSON) {query.sql}"
    with db.transaction(force_rollback=True):
        (plan,) = db.execute(statement, dict(query.params)).fetchone()  # type: ignore[misc]
    root = plan[0]["Plan"]
    nodes = list(plan_nodes(root))
    indexes = {node.get("Index Name") for node in nodes}
    assert "job_pkey" in indexes, json.dumps(root, indent=1)
    assert "job_lease_idx" not in indexes, json.dumps(root, indent=1)
    assert not [n for n in nodes if n["Node Type"] == "Seq Scan" and n.get("Relation Name") ==
                "job"], json.dumps(root, indent=1)
    updates = {n["Alias"]: n for n in nodes if n["Node Type"] == "ModifyTable"}
    assert updates.keys() == {"j", "c"}, json.dumps(root, indent=1)
    assert updates["j"]["Actual Rows"] == COMPLETED
    # the release of dependents (alias c) has none to release here
    assert "job_waiting_on_idx" in indexes, json.dumps(root, indent=1)
    buffers = root["Shared Hit Blocks"] + root["Shared Read Blocks"]
    assert buffers <= MAX_BUFFERS_PER_JOB * COMPLETED, f"{buffers} buffers for {COMPLETED}"


def test_a_completion_stays_fenced(pq: PortQueue, db: Db, schema: str) -> None:
    """The pinned plan keeps the fence: a stale lease token or a job no longer
    active is refused, the others are written."""
    pq.add_jobs(queue="hot", jobs=[{"data": {"n": n}} for n in range(3)])
    rows = claim_all(db, schema, 3)
    stale = dict(rows[0], lease_token=rows[0]["lease_token"] - 1)
    query = completion(schema, [stale, rows[1], rows[2]])
    (written,) = db.execute(query.sql, dict(query.params)).fetchone()  # type: ignore[misc]
    assert set(written) == {str(rows[1]["id"]), str(rows[2]["id"])}
    (again,) = db.execute(query.sql, dict(query.params)).fetchone()  # type: ignore[misc]
    assert again == [], "completed jobs are not completed twice"
    assert count_jobs(db, schema, "status = 'active'") == 1


def test_a_plain_add_leaves_no_transaction_open(pq: PortQueue, db: Db, schema: str) -> None:
    """The client's pooled connections run single statements in autocommit:
    the job is visible to another session at once, and the connection the
    add used is idle, not idle in transaction."""
    added = pq.add_job(queue="hot", data={"n": 1})
    assert count_jobs(db, schema, f"id = '{added.job_id}'") == 1
    states = db.execute(
        "SELECT state FROM pg_stat_activity WHERE datname = current_database() "
        "AND application_name = 'portqueue:client'").fetchall()
    assert states and all(state == "idle" for (state,) in states), states



async def test_the_claim_returns_claimeds_fields_in_order(pg_dsn: str, schema: str) -> None:
    """The worker builds each claimed row straight into a Claimed tuple, so the
    claim's RETURNING list is its field list; a claim returning anything else
    is refused at once rather than read into the wrong fields."""
    claim = queries_for(schema)(
        "claim", queues=["hot"], slots=[1], lease_seconds=[60], matching_patterns=[],
        refused_patterns=[], worker_id=str(uuid.uuid4()))
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        assert await fetch_async(conn, claim, Claimed.rows) == []  # the columns checked
        swapped = Query("claim", "SELECT 'q' AS queue, 'id' AS id", {})
        with pytest.raises(psycopg.ProgrammingError, match="the claim returned"):
            await fetch_async(conn, swapped, Claimed.rows)


def test_a_single_add_to_an_open_queue_is_one_plain_insert(pq: PortQueue, db: Db) -> None:
    """The commonest add tries the CTE-free INSERT first; only a queue with
    no row yet, or one paused for adds, takes the full statement after it."""
    names: list[str] = []

    def add(**options: Any) -> AddJobResult:
        def execute(query: Query) -> list[dict[str, Any]]:
            names.append(query.name)
            return execute_sync(db, query)

        names.clear()
        operation = operations.add_job(pq._settings, {"queue": "open", "data": 1, **options})
        return run_sync(operation, next(operation), execute)

    first = add()
    assert names == ["add_job_to_open_queue", "add_unkeyed_jobs"]
    second = add(schedule={"start_after_seconds": 30})
    assert names == ["add_job_to_open_queue"]
    assert second.start_after - first.start_after >= timedelta(seconds=30)
    assert pq.get_job(job_id=second.job_id).start_after == second.start_after
    third = add()
    assert names == ["add_job_to_open_queue"]
    assert pq.get_job(job_id=third.job_id).start_after == third.start_after
    pq.pause_queue(queue="open", mode=PauseMode.PROCESSING)
    add(priority=3)
    assert names == ["add_job_to_open_queue"], "paused for processing only: adds still go in"
    pq.pause_queue(queue="open", mode=PauseMode.ALL)
    with pytest.raises(QueuePausedError):
        add()
    assert names == ["add_job_to_open_queue", "add_unkeyed_jobs"]
    with pytest.raises(QueuePausedError):
        add(priority=3)
    assert names == ["add_job_to_open_queue", "add_unkeyed_jobs"]
    assert len(pq.get_jobs(queue="open").items) == 4


def test_a_batch_of_statements_runs_in_turn_without_a_pipeline(pq: PortQueue, db: Db) -> None:
    """A runner given no pipelined executor still runs a streamed batch: its
    statements one after the other, each built just before it is sent."""
    names: list[str] = []

    def execute(query: Query) -> list[dict[str, Any]]:
        names.append(query.name)
        return execute_sync(db, query)

    size = 2 * operations.STREAM_CHUNK + 1
    operation = operations.add_job_batch(
        pq._settings, "in-turn", [{"data": n} for n in range(size)], streamed=True)
    with db.transaction():
        results = run_sync(operation, next(operation), execute)
    assert names == ["add_unkeyed_jobs", "add_unkeyed_jobs", "add_unkeyed_jobs"]
    data = dict(db.execute(sql.SQL("SELECT id::text, data FROM {} WHERE queue = 'in-turn'").format(
        sql.Identifier(pq.schema, "job"))).fetchall())
    assert [data[result.job_id] for result in results] == list(range(size))


def test_repeated_adds_run_on_one_kept_cursor_and_reads_keep_none(
    pq: PortQueue, db: Db, schema: str,
) -> None:
    """psycopg keeps a cursor's adapters while the same statement runs on it
    again, so a pooled connection keeps one cursor per hot statement (not one
    per call, and none for a read, whose last page it would hold on to)."""
    for n in range(5):
        pq.add_job(queue="hot", data={"n": n})
    pq.add_jobs(queue="hot", jobs=[{"data": 5}, {"data": 6}])
    pq.add_jobs(queue="hot", jobs=[{"data": 7}, {"data": 8}])
    assert len(pq.get_jobs(queue="hot").items) == 9
    conn = pq._pool.getconn()
    try:
        # add_job_to_open_queue, add_unkeyed_jobs (the queue's first add, then
        # the batches)
        assert len(conn.kept_cursors) == 2
    finally:
        pq._pool.putconn(conn)
    assert count_jobs(db, schema) == 9


def test_a_kept_cursor_serves_the_next_add_after_a_failed_one(
    pq: PortQueue, db: Db, schema: str,
) -> None:
    """A statement that fails on a kept cursor leaves it usable: the next add
    on the same connection lands, and the failed one wrote nothing."""
    job = sql.Identifier(schema, "job")
    refuse = sql.Identifier(schema, "refuse_boom")
    db.execute(sql.SQL(
        "CREATE FUNCTION {}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "IF NEW.data ? 'boom' THEN RAISE EXCEPTION 'boom refused'; END IF; RETURN NEW; END $$"
    ).format(refuse))
    db.execute(sql.SQL("CREATE TRIGGER refuse_boom BEFORE INSERT ON {} FOR EACH ROW "
                       "EXECUTE FUNCTION {}()").format(job, refuse))
    try:
        pq.add_job(queue="hot", data={"n": 1})
        with pytest.raises(psycopg.errors.RaiseException, match="boom refused"):
            pq.add_job(queue="hot", data={"boom": 1})
        second = pq.add_job(queue="hot", data={"n": 2})
    finally:
        db.execute(sql.SQL("DROP TRIGGER refuse_boom ON {}").format(job))
        db.execute(sql.SQL("DROP FUNCTION {}()").format(refuse))
    assert pq._pool.get_stats()["pool_size"] == 1, "all three adds used one connection"
    assert count_jobs(db, schema) == 2
    assert count_jobs(db, schema, f"id = '{second.job_id}'") == 1


def test_a_client_used_one_call_at_a_time_keeps_to_one_connection(pq: PortQueue) -> None:
    """psycopg_pool hands its idle connections out in turn. A pool that grew on
    its first request (its first connection still being made) would send
    every other add of a one-at-a-time producer to the colder of two
    backends. It widens to pool_max_size once a connection has served, and
    grows under concurrent use as before."""
    for n in range(10):
        pq.add_job(queue="hot", data={"n": n})
    stats = pq._pool.get_stats()
    assert (stats["pool_size"], stats["pool_max"]) == (1, 10), stats

    held = threading.Barrier(3)

    def hold_a_connection() -> None:
        with pq._pool.connection():
            held.wait(timeout=30)  # all three at once, or BrokenBarrierError

    threads = [threading.Thread(target=hold_a_connection) for _ in range(2)]
    for thread in threads:
        thread.start()
    hold_a_connection()
    for thread in threads:
        thread.join()
    assert pq._pool.get_stats()["pool_size"] == 3


async def test_the_worker_pool_runs_one_statement_alone_and_several_in_one_transaction(
    apq_factory: Callable[..., AsyncPortQueue], db: Db, schema: str,
) -> None:
    """The worker's pool is autocommit, so a claim or a completion is one round
    trip; statements sent together (and the maintenance services' passes,
    which open their own) share one transaction, and none is left open."""
    apq = apq_factory(pool_max_size=2)
    done = asyncio.Event()

    @apq.handler("hot", concurrency=5)
    async def handle(job: Any) -> None:
        done.set()

    await apq.start(maintenance=True, scheduler=False)
    try:
        await apq.add_job(queue="hot", data={"n": 1})
        await asyncio.wait_for(done.wait(), 30)
        assert apq._host is not None
        worker = apq._host.worker
        spec = next(iter(worker.queues.values()))
        write = queries_for(schema)("upsert_queue", **{**spec.queue_row(), "queue": "half"})
        with pytest.raises(psycopg.errors.DivisionByZero):
            await worker.connections.execute(write, Query("fails", "SELECT 1 / 0", {}))
        assert db.execute(sql.SQL("SELECT count(*) FROM {}.queue WHERE name = 'half'").format(
            sql.Identifier(schema))).fetchone() == (0,), "the first statement was rolled back"
        await worker.connections.execute(write)
        assert db.execute(sql.SQL("SELECT count(*) FROM {}.queue WHERE name = 'half'").format(
            sql.Identifier(schema))).fetchone() == (1,), "one statement commits alone"
        for service in maintenance_services(worker.settings, worker.connections.pool):
            await service.run_once()  # type: ignore[attr-defined]
        states = db.execute(
            "SELECT state FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = 'portqueue:worker'").fetchall()
        assert states and all(state == "idle" for (state,) in states), states
    finally:
        await apq.stop()
        await apq.aclose()


def test_a_long_statement_reaches_the_server_without_psycopgs_conversion(
    pq: PortQueue, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``claim`` is past psycopg's conversion cache: it runs in the ``$n`` form
    converted once (Query.positional), on the pool's connections as on a
    worker's, and claims what it claims written out."""
    import psycopg._queries

    converted: list[bytes] = []  # what psycopg converted without its cache
    convert = psycopg._queries._query2pg_nocache

    def counted(query: bytes, *args: Any) -> Any:
        converted.append(query)
        return convert(query, *args)

    monkeypatch.setattr(psycopg._queries, "_query2pg_nocache", counted)
    job_id = pq.add_job(queue="long", data=1).job_id
    claim = claim_statement(pq.schema, "claim", "long", 1)
    assert claim.positional is not None
    with pq._pool.connection() as conn:
        (row,) = execute_sync(conn, claim)
    assert row["id"] == job_id
    assert converted == []
