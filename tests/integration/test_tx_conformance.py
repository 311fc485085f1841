"""The ``tx=`` conformance suite: every adapter of ``portqueue.tx`` passes the same tests.

Each behaviour is written once against a caller's transaction
(``tests/support/tx_adapters.py``) and runs for all eight adapters: psycopg
``Connection`` and ``AsyncConnection``; SQLAlchemy ``Session`` (on psycopg and on
psycopg2), ``Connection``, ``AsyncSession`` and ``AsyncConnection``; Django's
``atomic()``. Sync adapters
go through ``PortQueue``, async ones through ``AsyncPortQueue``. The contract
(SPEC §6): a job exists if and only if the caller's transaction commits;
portqueue never commits or rolls it back; the NOTIFY that wakes workers is
delivered on commit only; a duplicate key never aborts the caller's work.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql
from sqlalchemy import create_engine
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import NullPool

from portqueue import (
    CancelOutcome,
    DeduplicationReason,
    InvalidArgument,
    JobStatus,
    PauseMode,
    PortQueue,
    QueuePausedError,
)
from portqueue.tx import from_django, from_psycopg, from_sqlalchemy
from tests.support.rows import count_jobs, count_rows
from tests.support.tx_adapters import CallerTransaction, count_orders, sqlalchemy_url

QUEUE = "fulfillment"
@pytest.fixture
def listener(pg_dsn: str, schema: str) -> Iterator[psycopg.Connection[Any]]:
    """A separate connection LISTENing on the job channel, as a worker would."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(job_channel(schema))))
        yield conn


# --- helpers ---


def job_channel(schema: str) -> str:
    return f"{schema}.job"


def job_table(schema: str) -> str:
    return sql.Identifier(schema, "job").as_string()


def current_xid(caller: CallerTransaction) -> str:
    """The id of the caller's transaction (assigned by this call if it had none)."""
    ((xid,),) = caller.execute("SELECT pg_current_xact_id()::xid::text")
    return str(xid)


def notifications_before_marker(
    listener: psycopg.Connection[Any], db: psycopg.Connection[Any], channel: str
) -> list[str]:
    """The payloads delivered on ``channel`` before a marker we NOTIFY now.

    Postgres delivers notifications in commit order, so anything an earlier
    commit sent arrives before the marker: an empty list proves nothing was
    sent, with no sleep and no guessed deadline (the marker ends the wait).
    """
    marker = f"marker:{uuid.uuid4()}"
    db.execute("SELECT pg_notify(%s, %s)", (channel, marker))
    payloads: list[str] = []
    for notification in listener.notifies(timeout=10):
        if notification.payload == marker:
            return payloads
        payloads.append(notification.payload)
    raise AssertionError(f"the marker notification never arrived on {channel!r}")


def portqueue_state(db: psycopg.Connection[Any], schema: str) -> dict[str, Any]:
    """Every committed job's status, every schedule id, every queue's pause mode."""

    def select(query: str) -> list[tuple[Any, ...]]:
        return db.execute(sql.SQL(query).format(schema=sql.Identifier(schema))).fetchall()

    return {
        "jobs": dict(select("SELECT id::text, status::text FROM {schema}.job")),
        "schedules": {row[0] for row in select("SELECT id::text FROM {schema}.schedule")},
        "queues": dict(select("SELECT name, paused FROM {schema}.queue")),
    }


# --- 1. the job shares the fate of the caller's transaction ---


def test_rollback_discards_the_job_with_the_business_write(
    caller: CallerTransaction, db: psycopg.Connection[Any], schema: str
) -> None:
    caller.begin()
    caller.write_order("order-1")
    added = caller.client.add_job(queue=QUEUE, data={"order": "order-1"}, tx=caller.tx)
    assert added.job_id is not None and added.status is JobStatus.PENDING
    assert not added.deduplicated
    caller.rollback()

    assert count_jobs(db, schema) == 0
    assert count_orders(db) == 0
    # The queue row portqueue creates on first use went with it.
    assert count_rows(db, schema, "queue") == 0


def test_commit_keeps_the_job_and_the_business_write(
    caller: CallerTransaction, db: psycopg.Connection[Any], schema: str
) -> None:
    caller.begin()
    caller.write_order("order-1")
    added = caller.client.add_job(queue=QUEUE, data={"order": "order-1"}, tx=caller.tx)
    caller.commit()

    assert count_jobs(db, schema) == 1
    assert count_jobs(db, schema, f"id = '{added.job_id}' AND status = 'pending'") == 1
    assert count_orders(db) == 1
    snapshot = caller.client.get_job(job_id=added.job_id)
    assert snapshot is not None and snapshot.data == {"order": "order-1"}
    assert snapshot.queue == QUEUE


# --- 2. portqueue did not commit: the transaction stays the caller's ---


def test_portqueue_leaves_the_callers_transaction_open(
    caller: CallerTransaction, db: psycopg.Connection[Any], schema: str
) -> None:
    caller.begin()
    caller.write_order("order-1")
    xid = current_xid(caller)
    added = caller.client.add_job(queue=QUEUE, data={"order": "order-1"}, tx=caller.tx)

    # Still the same open transaction: a commit would have started a new one.
    assert caller.in_transaction()
    assert current_xid(caller) == xid
    # Nothing is visible to anyone else yet...
    assert count_jobs(db, schema) == 0
    assert count_orders(db) == 0
    assert caller.client.get_job(job_id=added.job_id) is None
    # ...while the caller sees its own job and keeps working.
    ((own,),) = caller.execute(
        f"SELECT count(*) FROM {job_table(schema)} WHERE id = %(id)s",  # noqa: S608
        {"id": added.job_id})
    assert own == 1
    caller.write_order("order-2")
    assert caller.in_transaction()
    caller.commit()

    # The job row was written by the caller's transaction itself.
    assert count_jobs(db, schema, f"id = '{added.job_id}' AND xmin::text = '{xid}'") == 1
    assert count_orders(db) == 2


# --- 3. NOTIFY on commit only ---


def test_notify_is_delivered_on_commit_only(
    caller: CallerTransaction,
    listener: psycopg.Connection[Any],
    db: psycopg.Connection[Any],
    schema: str,
) -> None:
    channel = job_channel(schema)

    caller.begin()
    caller.client.add_job(queue=QUEUE, data={"n": 1}, tx=caller.tx)
    assert notifications_before_marker(listener, db, channel) == []  # open: nothing yet
    caller.rollback()
    assert notifications_before_marker(listener, db, channel) == []  # rolled back: never

    caller.begin()
    caller.client.add_job(queue=QUEUE, data={"n": 2}, tx=caller.tx)
    assert notifications_before_marker(listener, db, channel) == []
    caller.commit()
    delivered = list(listener.notifies(timeout=10, stop_after=1))
    assert [(n.channel, n.payload) for n in delivered] == [(channel, QUEUE)]
    assert notifications_before_marker(listener, db, channel) == []  # exactly one


# --- 4. a duplicate key inside the caller's transaction does not abort it ---


def test_duplicate_keys_do_not_abort_the_callers_transaction(
    caller: CallerTransaction, db: psycopg.Connection[Any], schema: str
) -> None:
    client, tx = caller.client, caller.tx
    committed = client.add_job(queue=QUEUE, data={}, idempotency_key="charge:committed")

    caller.begin()
    caller.write_order("order-1")
    # against a committed job
    again = client.add_job(queue=QUEUE, data={}, idempotency_key="charge:committed", tx=tx)
    assert again.deduplicated and again.job_id == committed.job_id
    assert again.deduplication_reason is DeduplicationReason.IDEMPOTENCY
    # against a job added earlier in this same transaction
    first = client.add_job(queue=QUEUE, data={"n": 1}, idempotency_key="charge:42", tx=tx)
    second = client.add_job(queue=QUEUE, data={"n": 2}, idempotency_key="charge:42", tx=tx)
    assert not first.deduplicated
    assert second.deduplicated and second.job_id == first.job_id
    assert second.deduplication_reason is DeduplicationReason.IDEMPOTENCY
    single = client.add_job(queue=QUEUE, data={}, singleton_key="reindex", tx=tx)
    single_again = client.add_job(queue=QUEUE, data={}, singleton_key="reindex", tx=tx)
    assert single_again.deduplicated and single_again.job_id == single.job_id
    assert single_again.deduplication_reason is DeduplicationReason.SINGLETON

    # The transaction is not aborted: the caller's statements still run.
    assert caller.execute("SELECT 1") == [(1,)]
    caller.write_order("order-2")
    assert caller.in_transaction()
    caller.commit()

    assert count_jobs(db, schema) == 3
    assert count_jobs(db, schema, "idempotency_key = 'charge:42'") == 1
    assert count_jobs(db, schema, "singleton_key = 'reindex'") == 1
    assert count_orders(db) == 2


# --- 5. every tx-taking method joins the caller's transaction ---


@pytest.mark.parametrize("ending", ["commit", "rollback"])
def test_every_method_joins_the_callers_transaction(
    caller: CallerTransaction, db: psycopg.Connection[Any], schema: str, ending: str
) -> None:
    client, tx = caller.client, caller.tx
    # Committed beforehand, without tx: what the transaction then changes.
    to_cancel, to_retry, to_remove, to_remove_by_id, to_remove_by_status = (
        client.add_job(queue=QUEUE, data={"n": n}).job_id for n in range(5))
    client.cancel_job(job_id=to_retry)
    client.cancel_job(job_id=to_remove_by_status)
    schedule_id = client.add_job(
        queue=QUEUE, data={}, schedule={"start_every_seconds": 3600}).schedule_id
    client.pause_queue(queue="paused", mode=PauseMode.PROCESSING)
    before = portqueue_state(db, schema)

    caller.begin()
    retried = client.retry_job(job_id=to_retry, tx=tx)
    assert retried is not None and retried.job_id == to_retry
    assert retried.status is JobStatus.PENDING
    assert client.remove_jobs(queue=QUEUE, statuses=[JobStatus.CANCELLED], tx=tx) == 1
    assert client.cancel_job(job_id=to_cancel, tx=tx).outcome is CancelOutcome.CANCELLED
    assert client.remove_job(job_id=to_remove, tx=tx) is True
    assert client.remove_jobs(job_ids=[to_remove_by_id], tx=tx) == 1
    assert client.remove_schedule(schedule_id=schedule_id, tx=tx) is True
    assert client.pause_queue(queue=QUEUE, mode=PauseMode.ALL, tx=tx).paused is PauseMode.ALL
    with pytest.raises(QueuePausedError):  # a refused add leaves the transaction usable
        client.add_job(queue=QUEUE, data={}, tx=tx)
    assert client.resume_queue(queue="paused", tx=tx).paused is None
    # The batch's tx, given for the call or named by every entry.
    # The first is a batch: its options travel as arrays, bound by each
    # driver its own way (psycopg on the server, psycopg2 in the client).
    added = client.add_jobs(queue="new", jobs=[
        {"data": 1},
        {"data": "NULL", "priority": 5, "group_id": "g,{}",
         "retry": {"max_attempts": 2, "backoff": {"strategy": "exponential", "factor": 1.5}}},
    ], tx=tx)
    added += client.add_jobs(queue="new", jobs=[{"data": 2, "tx": tx}])
    assert [result.status for result in added] == [JobStatus.PENDING] * 3
    batched = client.get_job(job_id=added[1].job_id, tx=tx)
    assert batched is not None and (batched.data, batched.priority, batched.group_id) == (
        "NULL", 5, "g,{}")
    assert (batched.retry.max_attempts, batched.retry.backoff.factor) == (2, 1.5)
    assert batched.start_after == added[1].start_after

    # Reads through tx see the transaction's own, uncommitted work.
    snapshot = client.get_job(job_id=added[0].job_id, tx=tx)
    assert snapshot is not None and snapshot.data == 1 and snapshot.queue == "new"
    cancelled = client.get_job(job_id=to_cancel, tx=tx)
    assert cancelled is not None and cancelled.status is JobStatus.CANCELLED
    assert client.get_job(job_id=to_remove, tx=tx) is None
    page = client.get_jobs(queue="new", tx=tx)
    assert page.total == 3
    assert {item.job_id for item in page.items} == {result.job_id for result in added}
    stats = client.get_queue_stats(queue=QUEUE, tx=tx)
    assert stats.paused is PauseMode.ALL
    assert stats.counts[JobStatus.PENDING] == 1 and stats.counts[JobStatus.CANCELLED] == 1
    queues = client.get_queues(tx=tx)
    assert {info.queue: info.paused for info in queues.items} == {
        QUEUE: PauseMode.ALL, "paused": None, "new": None}
    assert client.get_schedules(queue=QUEUE, tx=tx).total == 0

    # None of it is visible outside, and portqueue committed none of it.
    assert portqueue_state(db, schema) == before
    assert client.get_job(job_id=added[0].job_id) is None
    assert caller.in_transaction()

    if ending == "rollback":
        caller.rollback()
        assert portqueue_state(db, schema) == before
        return
    caller.commit()
    assert portqueue_state(db, schema) == {
        "jobs": {
            to_cancel: "cancelled",
            to_retry: "pending",
            added[0].job_id: "pending",
            added[1].job_id: "pending",
            added[2].job_id: "pending",
        },
        "schedules": set(),
        "queues": {QUEUE: PauseMode.ALL.value, "paused": None, "new": None},
    }


# --- Django without time zone support: times stay right ---


@contextmanager
def process_time_zone(name: str) -> Iterator[None]:
    """Run with the process's local time zone set to ``name`` (restored after)."""
    saved = os.environ.get("TZ")
    os.environ["TZ"] = name
    time.tzset()
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = saved
        time.tzset()


@pytest.mark.skipif(not hasattr(time, "tzset"), reason="needs time.tzset (Unix)")
def test_from_django_times_are_right_when_django_uses_naive_datetimes(
    django_alias: str, pq: PortQueue, schema: str
) -> None:
    # USE_TZ=False makes Django load naive datetimes in its TIME_ZONE; a
    # process whose local zone differs (settings.configure(), Windows) used to
    # get results hours off, and schedules stored hours early.
    from django.db import connections, transaction
    from django.test import override_settings

    tx = from_django(using=django_alias)
    try:
        with (
            override_settings(USE_TZ=False),
            process_time_zone("Asia/Kathmandu"),
            transaction.atomic(using=django_alias),
        ):
            added = pq.add_job(queue=QUEUE, data={}, tx=tx)
            seen = pq.get_job(job_id=added.job_id, tx=tx)
            recurring = pq.add_job(
                queue=QUEUE, data={}, schedule={"start_every_seconds": 3600}, tx=tx)
    finally:
        connections[django_alias].close()

    truth = pq.get_job(job_id=added.job_id)  # read through psycopg, aware
    assert truth is not None and seen is not None
    assert seen.created_at == truth.created_at
    assert seen.created_at.utcoffset() == timedelta(0)
    assert added.start_after == truth.start_after
    # The schedule's first tick is an hour after the transaction's now().
    assert recurring.next_run_at == truth.created_at + timedelta(hours=1)
    (stored,) = pq.get_schedules(queue=QUEUE).items
    assert stored.next_run_at == truth.created_at + timedelta(hours=1)


# --- 6. misuse is refused before anything is written ---


def test_the_other_flavour_of_client_refuses_the_adapter(
    caller: CallerTransaction, db: psycopg.Connection[Any], schema: str
) -> None:
    expected = "PortQueue needs a sync adapter" if caller.is_async else "needs an async adapter"
    caller.begin()
    caller.write_order("order-1")
    with caller.other_client() as wrong:
        with pytest.raises(ValueError, match=r"^tx: ") as raised:
            wrong.add_job(queue=QUEUE, data={}, tx=caller.tx)
        assert isinstance(raised.value, InvalidArgument) and raised.value.argument == "tx"
        # The message says which flavour the client takes.
        assert expected in str(raised.value)
        with pytest.raises(ValueError, match=r"^tx: "):
            wrong.cancel_job(job_id=str(uuid.uuid4()), tx=caller.tx)
    assert caller.in_transaction()
    caller.commit()

    assert count_jobs(db, schema) == 0
    assert count_rows(db, schema, "queue") == 0
    assert count_orders(db) == 1


def test_from_psycopg_refuses_an_autocommit_connection_outside_a_transaction(
    pq: PortQueue, pg_dsn: str, db: psycopg.Connection[Any], schema: str
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        tx = from_psycopg(conn)
        with pytest.raises(ValueError, match=r"^tx: .*autocommit") as raised:
            pq.add_job(queue=QUEUE, data={}, tx=tx)
        assert isinstance(raised.value, InvalidArgument) and raised.value.argument == "tx"
        assert count_jobs(db, schema) == 0 and count_rows(db, schema, "queue") == 0

        # Inside `conn.transaction()` the same connection is a valid tx.
        with conn.transaction():
            added = pq.add_job(queue=QUEUE, data={}, tx=tx)
            assert count_jobs(db, schema) == 0
        assert count_jobs(db, schema, f"id = '{added.job_id}'") == 1


async def test_from_psycopg_refuses_an_async_autocommit_connection_outside_a_transaction(
    apq_factory: Any, pg_dsn: str, db: psycopg.Connection[Any], schema: str
) -> None:
    async with apq_factory() as apq, await psycopg.AsyncConnection.connect(
        pg_dsn, autocommit=True
    ) as conn:
        tx = from_psycopg(conn)
        with pytest.raises(ValueError, match=r"^tx: .*autocommit"):
            await apq.add_job(queue=QUEUE, data={}, tx=tx)
        assert count_jobs(db, schema) == 0 and count_rows(db, schema, "queue") == 0

        async with conn.transaction():
            added = await apq.add_job(queue=QUEUE, data={}, tx=tx)
            assert count_jobs(db, schema) == 0
        assert count_jobs(db, schema, f"id = '{added.job_id}'") == 1


def test_from_sqlalchemy_refuses_an_autocommit_connection(
    pq: PortQueue, pg_dsn: str, db: psycopg.Connection[Any], schema: str
) -> None:
    # AUTOCOMMIT makes SQLAlchemy's begin/commit/rollback no-ops: the job
    # would be committed at once, whatever the caller then decides.
    engine = create_engine(sqlalchemy_url(pg_dsn), poolclass=NullPool)
    try:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.begin()
            with pytest.raises(ValueError, match=r"^tx: .*AUTOCOMMIT"):
                pq.add_job(queue=QUEUE, data={}, tx=from_sqlalchemy(conn))
            conn.rollback()
    finally:
        engine.dispose()
    assert count_jobs(db, schema) == 0 and count_rows(db, schema, "queue") == 0


def test_from_django_refuses_to_run_outside_atomic(
    django_alias: str, pq: PortQueue, db: psycopg.Connection[Any], schema: str
) -> None:
    from django.db import connections

    tx = from_django(using=django_alias)
    try:
        with pytest.raises(ValueError, match=r"^tx: .*atomic"):
            pq.add_job(queue=QUEUE, data={}, tx=tx)
        with pytest.raises(ValueError, match=r"^tx: "):
            pq.cancel_job(job_id=str(uuid.uuid4()), tx=tx)
    finally:
        connections[django_alias].close()
    assert count_jobs(db, schema) == 0 and count_rows(db, schema, "queue") == 0


def test_from_django_refuses_an_unknown_database_alias(django_alias: str) -> None:
    with pytest.raises(ValueError, match=r"^using: .*no-such-alias"):
        from_django(using="no-such-alias")


def test_adapters_refuse_objects_of_the_wrong_type(pg_dsn: str) -> None:
    engine = create_engine(sqlalchemy_url(pg_dsn), poolclass=NullPool)
    try:
        with psycopg.connect(pg_dsn) as psycopg_conn, Session(engine) as session:
            wrong_for_psycopg: list[Any] = [None, object(), pg_dsn, session, engine]
            wrong_for_sqlalchemy: list[Any] = [
                None, object(), pg_dsn, psycopg_conn, engine, sessionmaker(engine)]
            for wrong in wrong_for_psycopg:
                with pytest.raises(ValueError, match=r"^tx: "):
                    from_psycopg(wrong)
            for wrong in wrong_for_sqlalchemy:
                with pytest.raises(ValueError, match=r"^tx: "):
                    from_sqlalchemy(wrong)
    finally:
        engine.dispose()


def test_a_raw_connection_is_not_a_tx(
    pq: PortQueue, pg_dsn: str, db: psycopg.Connection[Any], schema: str
) -> None:
    # The adapter is required: a bare connection is refused, not guessed at.
    with psycopg.connect(pg_dsn) as conn, pytest.raises(ValueError, match=r"^tx: "):
        pq.add_job(queue=QUEUE, data={}, tx=conn)
    assert count_jobs(db, schema) == 0
