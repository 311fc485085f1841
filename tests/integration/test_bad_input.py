"""Bad input on a real Postgres: a ValueError naming the argument, and nothing written.

Which inputs each method refuses, before any statement is sent, is
tests/unit/test_refused_before_io.py (every case, on the operations, with a
recording executor). Here, once per public method, the database side: each
test fingerprints the job, queue and schedule tables (every row's full text,
so an UPDATE shows as well as an INSERT or DELETE) before and after the
rejected call. Tables start with a job, a paused-never queue and a schedule of
their own, so "unchanged" is never the trivial "still empty".
"""

from __future__ import annotations

import math
import re
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.pq import TransactionStatus

from portqueue import InvalidArgument, JobStatus, PayloadTooLarge, PortQueue
from portqueue.migrate import migrate
from portqueue.operations import STREAM_CHUNK
from tests.support.inputs import DIFFERENT_MEANING_PATTERNS, PYTHON_ONLY_PATTERNS, exact_string
from tests.support.recording import METHODS
from tests.support.refusals import Unchanged, assert_refused, fingerprint
from tests.support.rows import CallerTx

NEW_QUEUE = "never-created"


@pytest.fixture
def existing(client: Any, db: psycopg.Connection[Any], schema: str) -> dict[str, str]:
    """One job and one schedule already in the tables, for the calls that name them."""
    added = client.add_job(queue="existing", data={"n": 1}, idempotency_key="first")
    scheduled = client.add_job(queue="existing", data={"n": 2},
                               schedule={"start_every_seconds": 60})
    assert added.job_id is not None and scheduled.schedule_id is not None
    return {"job_id": added.job_id, "schedule_id": scheduled.schedule_id}


def assert_rejected_without_writing(
    db: psycopg.Connection[Any], schema: str, call: Any, argument: str,
    error: type[InvalidArgument] = InvalidArgument,
) -> None:
    before = Unchanged(db, schema)
    with pytest.raises(error) as info:
        call()
    assert_refused(info.value, argument)
    before.assert_unchanged()
    row = db.execute(sql.SQL("SELECT count(*) FROM {} WHERE name = %s").format(
        sql.Identifier(schema, "queue")), [NEW_QUEUE]).fetchone()
    assert row == (0,), "the queue row was created"


def test_fingerprint_sees_a_write(
    client: Any, db: psycopg.Connection[Any], schema: str, existing: dict[str, str]
) -> None:
    # The fingerprint must be able to fail: an update to one column changes it.
    before = fingerprint(db, schema)
    client.pause_queue(queue="existing")
    assert fingerprint(db, schema) != before


D = {"to": "a@b.com"}

# One refused call per public method (the unit file has every case).
ONE_PER_METHOD = [
    ("add_job", {"queue": NEW_QUEUE, "data": D, "retry": {"max_attempts": 3, "foo": 1}},
     "retry.foo"),
    ("add_job", {"queue": NEW_QUEUE, "data": math.nan,
                 "schedule": {"start_every_seconds": 60}}, "data"),
    ("add_jobs", {"queue": NEW_QUEUE, "jobs": [{"data": 1}, {"data": 2, "priority": 2**31}]},
     "jobs[1].priority"),
    ("retry_job", {"job_id": "not-a-uuid"}, "job_id"),
    ("cancel_job", {"job_id": 12}, "job_id"),
    ("remove_job", {"job_id": ""}, "job_id"),
    ("remove_jobs", {"queue": "existing", "statuses": [JobStatus.PENDING, JobStatus.ACTIVE]},
     "statuses"),
    ("remove_schedule", {"schedule_id": "x"}, "schedule_id"),
    ("pause_queue", {"queue": NEW_QUEUE, "mode": "sometimes"}, "mode"),
    ("resume_queue", {"queue": ""}, "queue"),
    ("get_job", {"job_id": "nope"}, "job_id"),
    ("get_jobs", {"queue": "existing", "limit": 501}, "limit"),
    ("get_queue_stats", {"queue": ""}, "queue"),
    ("get_queues", {"limit": 501}, "limit"),
    ("get_schedules", {"enabled": "yes"}, "enabled"),
]


def test_every_method_has_a_database_check() -> None:
    assert {method for method, _, _ in ONE_PER_METHOD} == set(METHODS)


@pytest.mark.parametrize(("method", "kwargs", "argument"), ONE_PER_METHOD,
                         ids=[f"{m}-{a}" for m, _, a in ONE_PER_METHOD])
def test_bad_input_writes_nothing(
    client: Any, db: psycopg.Connection[Any], schema: str, existing: dict[str, str],
    method: str, kwargs: dict[str, Any], argument: str,
) -> None:
    assert_rejected_without_writing(
        db, schema, lambda: getattr(client, method)(**kwargs), argument)


def test_payload_over_the_limit_writes_nothing(
    client: Any, db: psycopg.Connection[Any], schema: str, existing: dict[str, str]
) -> None:
    assert_rejected_without_writing(
        db, schema, lambda: client.add_job(queue=NEW_QUEUE, data=exact_string(1024 * 1024 + 1)),
        "data", PayloadTooLarge)


def test_payload_at_the_limit_is_stored_whole(
    client: Any, db: psycopg.Connection[Any], schema: str
) -> None:
    data = {"blob": exact_string(1024 * 1024 - len('{"blob":}'), "\U0001f600")}
    added = client.add_job(queue="big", data=data)
    assert client.get_job(job_id=added.job_id).data == data
    row = db.execute(sql.SQL("SELECT octet_length(data::text) FROM {} WHERE id = %s").format(
        sql.Identifier(schema, "job")), [added.job_id]).fetchone()
    # jsonb's text form puts a space after the colon; the limit is on compact JSON.
    assert row == (1024 * 1024 + 1,)


def test_payload_over_a_custom_limit_writes_nothing(
    pg_dsn: str, db: psycopg.Connection[Any], schema: str
) -> None:
    with PortQueue(pg_dsn, schema=schema, max_payload_bytes=100) as small:
        small.add_job(queue="existing", data=exact_string(100))
        assert_rejected_without_writing(
            db, schema, lambda: small.add_job(queue=NEW_QUEUE, data=exact_string(101)),
            "data", PayloadTooLarge)


@pytest.mark.parametrize(("last", "argument"), [
    ({"data": math.nan}, "data"), ({"data": exact_string(1024 * 1024 + 1)}, "data"),
], ids=["invalid", "too large"])
def test_a_streamed_batch_with_only_the_last_entry_bad_writes_nothing(
    client: Any, db: psycopg.Connection[Any], schema: str, existing: dict[str, str],
    last: dict[str, Any], argument: str,
) -> None:
    """Past STREAM_CHUNK entries a batch sends its first chunks before the last
    is validated; its transaction rolls them back, the new queue's row too."""
    good = 2 * STREAM_CHUNK
    jobs = [{"data": {"n": n}, "priority": n % 5} for n in range(good)] + [last]
    error = PayloadTooLarge if len(str(last["data"])) > 1024 else InvalidArgument
    assert_rejected_without_writing(
        db, schema, lambda: client.add_jobs(queue=NEW_QUEUE, jobs=jobs),
        f"jobs[{good}].{argument}", error)
    assert len(client.add_jobs(queue=NEW_QUEUE, jobs=jobs[:-1])) == good


def test_add_jobs_with_entries_in_different_transactions_writes_nothing(
    client: Any, pg_dsn: str, db: psycopg.Connection[Any], schema: str, existing: dict[str, str]
) -> None:
    with CallerTx(client, pg_dsn) as first, CallerTx(client, pg_dsn) as second:
        jobs = [{"data": 1, "tx": first.tx}, {"data": 2, "tx": second.tx}]
        assert_rejected_without_writing(
            db, schema, lambda: client.add_jobs(queue=NEW_QUEUE, jobs=jobs), "jobs[1].tx")


def test_remove_jobs_with_both_ids_and_queue_removes_nothing(
    client: Any, db: psycopg.Connection[Any], schema: str, existing: dict[str, str]
) -> None:
    assert_rejected_without_writing(
        db, schema,
        lambda: client.remove_jobs(job_ids=[existing["job_id"]], queue="existing"), "job_ids")
    assert client.get_job(job_id=existing["job_id"]) is not None


def test_bad_input_leaves_the_callers_transaction_usable(
    client: Any, pg_dsn: str, db: psycopg.Connection[Any], schema: str
) -> None:
    # A value Postgres would refuse mid-statement aborts the caller's whole
    # transaction; refused before I/O, the caller's own work can still commit.
    with CallerTx(client, pg_dsn) as caller:
        caller.execute("SELECT 1")
        for bad in ({"data": {"k": "\x00"}}, {"data": 1, "priority": 2**31},
                    {"data": 1, "preferred_instance_key_pattern": "(?>x)"}):
            with pytest.raises(ValueError):
                client.add_job(queue="in-tx", tx=caller.tx, **bad)
            assert caller.conn.info.transaction_status == TransactionStatus.INTRANS
        client.add_job(queue="in-tx", data={"ok": True}, tx=caller.tx)
        caller.commit()
    assert client.get_jobs(queue="in-tx").total == 1


# --- preferred_instance_key_pattern: the refused patterns really are a hazard ---


@pytest.mark.parametrize("pattern", PYTHON_ONLY_PATTERNS)
def test_python_only_pattern_is_refused_by_postgres_and_by_portqueue(
    pq: PortQueue, db: psycopg.Connection[Any], schema: str, pattern: str
) -> None:
    re.compile(pattern)  # Python takes it...
    with pytest.raises(psycopg.errors.InvalidRegularExpression):
        db.execute("SELECT 'test-host-ram-8gb' ~ %s", [pattern])  # ...the claim's `~` would not
    assert_rejected_without_writing(
        db, schema,
        lambda: pq.add_job(queue=NEW_QUEUE, data=1, preferred_instance_key_pattern=pattern),
        "preferred_instance_key_pattern")


def test_word_boundary_means_backspace_in_postgres(db: psycopg.Connection[Any]) -> None:
    # Why \b is in DIFFERENT_MEANING_PATTERNS: both engines accept it, and disagree.
    assert r"\bgpu\b" in DIFFERENT_MEANING_PATTERNS
    assert re.search(r"\bgpu\b", "host-gpu-1")
    assert db.execute(r"SELECT 'host-gpu-1' ~ '\bgpu\b'").fetchone() == (False,)


# --- schema names ---


@pytest.mark.parametrize(
    "schema_name", ['a"b', "a;drop", "1abc", "x" * 49, "", "sch\u00e9ma", "pg_portqueue",
                    "information_schema", "pg_catalog"])
def test_migrate_refuses_a_hostile_schema_and_creates_nothing(
    pg_dsn: str, db: psycopg.Connection[Any], schema_name: str
) -> None:
    def namespaces() -> list[str]:
        return [row[0] for row in db.execute("SELECT nspname FROM pg_namespace ORDER BY 1")]

    def portqueue_tables() -> int:
        row = db.execute(
            "SELECT count(*) FROM pg_tables WHERE tablename IN ('job', 'queue', 'schedule')"
        ).fetchone()
        assert row is not None
        return int(row[0])

    before = (namespaces(), portqueue_tables())
    with pytest.raises(InvalidArgument) as info:
        migrate(pg_dsn, schema=schema_name)
    assert info.value.argument == "schema"
    assert (namespaces(), portqueue_tables()) == before
