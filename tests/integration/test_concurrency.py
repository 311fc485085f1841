"""Concurrent producers against one key: idempotency and singleton dedup hold under
real races, never raise, and never abort a caller's transaction.

Races are made real, not hoped for: threads (or tasks) start together behind a
barrier, and the deterministic cases hold the first writer's transaction open
until the duplicates are seen waiting on its row lock in pg_stat_activity."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from portqueue import AddJobResult, DeduplicationReason, JobStatus, PortQueue
from portqueue.tx import from_psycopg
from tests.support.activity import waiting_on_locks
from tests.support.rows import CallerTx, count_jobs, count_rows, finish, is_async, make_active
from tests.support.waiting import wait_until

Db = psycopg.Connection[Any]
ADDS = 50
MANY_ADDS = 400
# Connections a test holds open at once stay well under max_connections (100),
# with other xdist workers' tests running beside it.
CONNECTIONS = 12


def add_concurrently(client: Any, n: int, **options: Any) -> list[AddJobResult]:
    """``n`` add_job calls on one shared client, all started together."""
    if is_async(client):

        async def run() -> list[AddJobResult]:
            start = asyncio.Event()

            async def one(i: int) -> AddJobResult:
                await start.wait()
                return await client.inner.add_job(data={"n": i}, **options)  # type: ignore[no-any-return]

            tasks = [asyncio.ensure_future(one(i)) for i in range(n)]
            await asyncio.sleep(0)  # let every task reach the start line
            start.set()
            return await asyncio.gather(*tasks)

        return client.run(run())  # type: ignore[no-any-return]
    barrier = threading.Barrier(n, timeout=30)

    def one(i: int) -> AddJobResult:
        barrier.wait()
        return client.add_job(data={"n": i}, **options)  # type: ignore[no-any-return]

    with ThreadPoolExecutor(max_workers=n) as pool:
        return list(pool.map(one, range(n)))


def assert_one_winner(results: list[AddJobResult], reason: DeduplicationReason) -> str:
    job_ids = {r.job_id for r in results}
    assert len(job_ids) == 1, f"{len(job_ids)} different jobs named"
    winners = [r for r in results if not r.deduplicated]
    assert len(winners) == 1, f"{len(winners)} results claim to have added the job"
    assert all(r.deduplication_reason is reason for r in results if r.deduplicated)
    assert winners[0].deduplication_reason is None
    return job_ids.pop()  # type: ignore[return-value]


def test_fifty_concurrent_adds_with_one_idempotency_key(
    both_clients: Any, db: Db, schema: str
) -> None:
    results = add_concurrently(both_clients, ADDS, queue="payments", idempotency_key="charge:42")
    assert len(results) == ADDS
    job_id = assert_one_winner(results, DeduplicationReason.IDEMPOTENCY)
    assert all(r.status is JobStatus.PENDING and r.queue == "payments" for r in results)
    assert count_jobs(db, schema) == 1
    assert count_jobs(db, schema, f"id = '{job_id}' AND idempotency_key = 'charge:42'") == 1
    assert count_rows(db, schema, "queue") == 1, "the queue row was created once"


@pytest.mark.parametrize("first", ["pending", "active", "completed"])
def test_four_hundred_concurrent_adds_meet_the_first_job_whatever_its_status(
    both_clients: Any, db: Db, schema: str, first: str
) -> None:
    # Issue 24: the key holds for as long as the job is kept, wherever the
    # first job's row is (a partitioned history moves it when it finishes).
    original = both_clients.add_job(queue="payments", data={}, idempotency_key="charge:400")
    if first == "active":
        make_active(db, schema, original.job_id)
    elif first == "completed":
        finish(db, schema, original.job_id, first)
    results = add_concurrently(both_clients, MANY_ADDS, queue="payments",
                               idempotency_key="charge:400")
    assert {r.job_id for r in results} == {original.job_id}
    assert all(r.deduplicated and r.deduplication_reason is DeduplicationReason.IDEMPOTENCY
               and r.status is JobStatus(first) for r in results)
    assert count_jobs(db, schema) == 1


def test_fifty_concurrent_adds_with_one_singleton_key(
    both_clients: Any, db: Db, schema: str
) -> None:
    results = add_concurrently(both_clients, ADDS, queue="reindex", singleton_key="reindex:acme")
    assert len(results) == ADDS
    job_id = assert_one_winner(results, DeduplicationReason.SINGLETON)
    assert count_jobs(db, schema) == 1
    assert count_jobs(db, schema, f"id = '{job_id}'") == 1


def test_concurrent_adds_with_both_keys(both_clients: Any, db: Db, schema: str) -> None:
    results = add_concurrently(both_clients, ADDS, queue="both", idempotency_key="i",
                               singleton_key="s")
    job_id = assert_one_winner(results, DeduplicationReason.IDEMPOTENCY)
    assert count_jobs(db, schema) == 1 and results[0].job_id == job_id


def test_concurrent_recurring_adds_with_one_key(both_clients: Any, db: Db, schema: str) -> None:
    results = add_concurrently(both_clients, 20, queue="digest", idempotency_key="daily",
                               schedule={"cron": "0 8 * * *"})
    schedule_ids = {r.schedule_id for r in results}
    assert len(schedule_ids) == 1 and None not in schedule_ids
    assert sum(not r.deduplicated for r in results) == 1
    assert count_rows(db, schema, "schedule") == 1
    assert count_jobs(db, schema) == 0


def test_concurrent_batches_with_overlapping_keys(
    both_clients: Any, db: Db, schema: str
) -> None:
    # Batches naming the same keys in different orders must neither deadlock
    # nor raise: every batch gets one result per entry naming the one job.
    keys = [f"k{i}" for i in range(10)]
    orders = [keys, list(reversed(keys)), keys[5:] + keys[:5], keys[::2] + keys[1::2]]

    def batch(i: int) -> list[dict[str, Any]]:
        return [{"data": {"batch": i, "key": key}, "idempotency_key": key}
                for key in orders[i % len(orders)]]

    if is_async(both_clients):

        async def run() -> list[list[AddJobResult]]:
            return await asyncio.gather(
                *(both_clients.inner.add_jobs(queue="batches", jobs=batch(i)) for i in range(16)))

        outcomes = both_clients.run(run())
    else:
        barrier = threading.Barrier(16, timeout=30)

        def one(i: int) -> list[AddJobResult]:
            barrier.wait()
            return both_clients.add_jobs(queue="batches", jobs=batch(i))  # type: ignore[no-any-return]

        with ThreadPoolExecutor(max_workers=16) as pool:
            outcomes = list(pool.map(one, range(16)))

    assert count_jobs(db, schema) == len(keys)
    owner = {key: None for key in keys}
    rows = db.execute(sql.SQL("SELECT idempotency_key, id::text FROM {}").format(
        sql.Identifier(schema, "job"))).fetchall()
    owner.update(dict(rows))
    for i, results in enumerate(outcomes):
        order = orders[i % len(orders)]
        assert [r.job_id for r in results] == [owner[key] for key in order]
    fresh = sum(not r.deduplicated for results in outcomes for r in results)
    assert fresh == len(keys)


PAUSE_LOCK = 4242


def test_batches_in_opposite_key_orders_do_not_deadlock(
    pq: PortQueue, db: Db, schema: str
) -> None:
    """The race above, made certain: batch A stops half-way (a test trigger waits
    on an advisory lock the test holds) while batch B, naming the same keys in the
    opposite order, runs into A's keys. Released, A must not need a key B holds."""
    function = sql.Identifier(schema, "test_pause_insert")
    job_table = sql.Identifier(schema, "job")
    db.execute(sql.SQL("""
        CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.data ->> 'pause_at' = NEW.idempotency_key THEN
                PERFORM pg_advisory_xact_lock_shared({lock});
            END IF;
            RETURN NEW;
        END $$""").format(function=function, lock=sql.Literal(PAUSE_LOCK)))
    try:
        db.execute(sql.SQL("CREATE TRIGGER test_pause_insert BEFORE INSERT ON {} "
                           "FOR EACH ROW EXECUTE FUNCTION {}()").format(job_table, function))
        keys = [f"k{i}" for i in range(10)]
        batch_a = [{"data": {"pause_at": "k5"}, "idempotency_key": key} for key in keys]
        batch_b = [{"data": {}, "idempotency_key": key} for key in reversed(keys)]

        def waiting(event: str) -> int:
            row = db.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = "
                             "current_database() AND wait_event = %s", [event]).fetchone()
            assert row is not None
            return int(row[0])

        db.execute("SELECT pg_advisory_lock(%s)", [PAUSE_LOCK])
        with ThreadPoolExecutor(max_workers=2) as pool:
            try:
                a = pool.submit(pq.add_jobs, queue="q", jobs=batch_a)
                wait_until(lambda: waiting("advisory") == 1, 20, "batch A to stop half-way")
                b = pool.submit(pq.add_jobs, queue="q", jobs=batch_b)
                wait_until(lambda: waiting("transactionid") == 1, 20,
                           "batch B to wait on batch A's keys")
            finally:
                # released on failure too, or the executor would wait for A forever
                db.execute("SELECT pg_advisory_unlock_all()")
            results_a, results_b = a.result(timeout=30), b.result(timeout=30)
    finally:
        db.execute(sql.SQL("DROP TRIGGER IF EXISTS test_pause_insert ON {}").format(job_table))
        db.execute(sql.SQL("DROP FUNCTION IF EXISTS {}()").format(function))

    assert count_jobs(db, schema) == 10
    assert all(not r.deduplicated for r in results_a)
    assert [r.job_id for r in results_b] == [r.job_id for r in reversed(results_a)]
    assert all(r.deduplicated for r in results_b)


# --- inside callers' transactions ---


def test_duplicate_in_a_caller_tx_does_not_abort_it(
    client: Any, pg_dsn: str, db: Db, schema: str
) -> None:
    first = client.add_job(queue="payments", data={}, idempotency_key="charge:1")
    held = client.add_job(queue="reindex", data={}, singleton_key="acme")
    with CallerTx(client, pg_dsn) as caller:
        dup = client.add_job(queue="payments", data={}, idempotency_key="charge:1", tx=caller.tx)
        assert dup.deduplicated and dup.job_id == first.job_id
        single = client.add_job(queue="reindex", data={}, singleton_key="acme", tx=caller.tx)
        assert single.deduplicated and single.job_id == held.job_id
        (batched,) = client.add_jobs(queue="payments", jobs=[
            {"data": {}, "idempotency_key": "charge:1"}], tx=caller.tx)
        assert batched.deduplicated and batched.job_id == first.job_id
        # the caller's transaction is alive: it can go on and commit
        assert caller.execute("SELECT 1") == [(1,)]
        fresh = client.add_job(queue="payments", data={}, idempotency_key="charge:2",
                               tx=caller.tx)
        assert not fresh.deduplicated
        caller.commit()
    assert count_jobs(db, schema) == 3
    assert count_jobs(db, schema, f"id = '{fresh.job_id}'") == 1


def test_duplicate_of_a_job_added_earlier_in_the_same_tx(
    client: Any, pg_dsn: str, db: Db, schema: str
) -> None:
    with CallerTx(client, pg_dsn) as caller:
        first = client.add_job(queue="payments", data={}, idempotency_key="k", tx=caller.tx)
        again = client.add_job(queue="payments", data={}, idempotency_key="k", tx=caller.tx)
        assert again.deduplicated and again.job_id == first.job_id
        s1 = client.add_job(queue="payments", data={}, singleton_key="s", tx=caller.tx)
        s2 = client.add_job(queue="payments", data={}, singleton_key="s", tx=caller.tx)
        assert s2.deduplicated and s2.job_id == s1.job_id
        assert caller.execute("SELECT 1") == [(1,)]
        caller.commit()
    assert count_jobs(db, schema) == 2


@pytest.mark.parametrize("first_writer", ["commits", "rolls back"])
@pytest.mark.parametrize("key", ["idempotency_key", "singleton_key"])
def test_duplicates_waiting_on_an_uncommitted_first_writer(
    pq: PortQueue, pg_dsn: str, db: Db, schema: str, key: str, first_writer: str
) -> None:
    """Duplicates arrive while the first writer's transaction is still open: they
    wait for it, then either dedup against it (commit) or one of them takes over
    (rollback); every caller's transaction survives and commits."""
    tag = f"pq-dup-{key}-{first_writer.replace(' ', '-')}"
    dsn = make_conninfo(pg_dsn, application_name=tag)
    n = CONNECTIONS - 1
    keyed: dict[str, Any] = {key: "the-key"}
    with psycopg.connect(dsn) as first_conn:
        first = pq.add_job(queue="q", data={"first": True}, tx=from_psycopg(first_conn),
                           **keyed)
        assert not first.deduplicated

        def duplicate(i: int) -> tuple[AddJobResult, Any]:
            with psycopg.connect(dsn) as conn:
                result = pq.add_job(queue="q", data={"n": i}, tx=from_psycopg(conn),
                                    **keyed)
                # the transaction is still usable after a dedup
                after = conn.execute("SELECT %s::int", [i]).fetchone()
                conn.commit()
                return result, after

        with ThreadPoolExecutor(max_workers=n) as pool:
            futures = [pool.submit(duplicate, i) for i in range(n)]
            wait_until(lambda: waiting_on_locks(db, tag) == n, 20,
                       f"{n} duplicates to wait on the first writer's row")
            assert not any(f.done() for f in futures)
            assert first_conn.execute("SELECT 1").fetchone() == (1,)
            if first_writer == "commits":
                first_conn.commit()
            else:
                first_conn.rollback()
            outcomes = [f.result(timeout=30) for f in futures]

    assert [after for _, after in outcomes] == [(i,) for i in range(n)]
    results = [result for result, _ in outcomes]
    reason = (DeduplicationReason.IDEMPOTENCY if key == "idempotency_key"
              else DeduplicationReason.SINGLETON)
    assert count_jobs(db, schema) == 1
    (job_id,) = {r.job_id for r in results}
    if first_writer == "commits":
        assert job_id == first.job_id
        assert all(r.deduplicated and r.deduplication_reason is reason for r in results)
    else:
        assert job_id != first.job_id
        assert sum(not r.deduplicated for r in results) == 1
        assert count_jobs(db, schema, f"id = '{first.job_id}'") == 0


def test_concurrent_caller_transactions_with_one_key(
    both_clients: Any, pg_dsn: str, db: Db, schema: str
) -> None:
    """Many callers, each in its own transaction on its own connection, add the same
    key and then keep using and commit their transactions."""
    n = CONNECTIONS
    if is_async(both_clients):

        async def run() -> list[tuple[AddJobResult, Any]]:
            connected = 0
            start = asyncio.Event()

            async def one(i: int) -> tuple[AddJobResult, Any]:
                nonlocal connected
                async with await psycopg.AsyncConnection.connect(pg_dsn) as conn:
                    connected += 1
                    if connected == n:  # everyone is connected: go together
                        start.set()
                    await start.wait()
                    result = await both_clients.inner.add_job(
                        queue="payments", data={"n": i}, idempotency_key="charge:7",
                        tx=from_psycopg(conn))
                    cursor = await conn.execute("SELECT %s::int", [i])
                    after = await cursor.fetchone()
                    await conn.commit()
                    return result, after

            return await asyncio.gather(*(one(i) for i in range(n)))

        outcomes = both_clients.run(run())
    else:
        barrier = threading.Barrier(n, timeout=30)

        def one(i: int) -> tuple[AddJobResult, Any]:
            with psycopg.connect(pg_dsn) as conn:
                barrier.wait()
                result = both_clients.add_job(queue="payments", data={"n": i},
                                        idempotency_key="charge:7", tx=from_psycopg(conn))
                after = conn.execute("SELECT %s::int", [i]).fetchone()
                conn.commit()
                return result, after

        with ThreadPoolExecutor(max_workers=n) as pool:
            outcomes = list(pool.map(one, range(n)))

    assert [after for _, after in outcomes] == [(i,) for i in range(n)]
    assert_one_winner([result for result, _ in outcomes], DeduplicationReason.IDEMPOTENCY)
    assert count_jobs(db, schema) == 1


@pytest.mark.parametrize("in_caller_tx", [False, True], ids=["pooled", "caller-tx"])
def test_retry_while_a_new_singleton_job_is_being_added(
    pq: PortQueue, pg_dsn: str, db: Db, schema: str, in_caller_tx: bool
) -> None:
    old = pq.add_job(queue="reindex", data={}, singleton_key="acme")
    db.execute(sql.SQL("UPDATE {} SET status = 'failed', finished_at = now() WHERE id = %s")
               .format(sql.Identifier(schema, "job")), [old.job_id])
    with psycopg.connect(pg_dsn) as adding, ThreadPoolExecutor(max_workers=1) as pool:
        new = pq.add_job(queue="reindex", data={}, singleton_key="acme",
                         tx=from_psycopg(adding))
        retrying = psycopg.connect(pg_dsn)
        retry_tx = from_psycopg(retrying) if in_caller_tx else None
        retried = pool.submit(pq.retry_job, job_id=old.job_id, tx=retry_tx)
        try:
            wait_until(lambda: db.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event = 'transactionid'").fetchone() == (1,), 20,
                "retry_job to wait on the uncommitted add")
        finally:
            adding.commit()
        result = retried.result(timeout=30)
        # the conflict did not poison the retrying transaction: it can go on and commit
        assert retrying.execute("SELECT 1").fetchone() == (1,)
        retrying.commit()
        retrying.close()
    # reported like a holder found up front: the new job, deduplicated
    assert result is not None and result.deduplicated and result.job_id == new.job_id
    assert count_jobs(db, schema, "status = 'pending'") == 1
