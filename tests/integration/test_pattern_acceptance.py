"""Issue 16.1: PostgreSQL, within a deadline, decides which
``preferred_instance_key_pattern`` an add accepts.

The local validator's size estimate passed ``((a{0,20}){0,20}){0,20}b``, which
PostgreSQL refuses after seconds of CPU ("regular expression is too complex"),
and ``(a{0,255}){39}b``, which it compiles in a quarter of a second. Every add
path refuses both with a ValueError naming the argument and writes nothing;
inside a caller's transaction the refusal leaves it usable. An add naming no
pattern sends no statement more than before.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest

from portqueue import InvalidArgument, PortQueue, operations
from portqueue.queries import Batch, Query
from portqueue.settings import client_settings
from tests.support.cli import Cli
from tests.support.refusals import Unchanged, assert_refused
from tests.support.rows import count_jobs
from tests.support.tx_adapters import CallerTransaction, count_orders

Db = psycopg.Connection[Any]

TOO_COMPLEX = "((a{0,20}){0,20}){0,20}b"  # refused by PostgreSQL, after seconds of CPU
SLOW = "(a{0,255}){39}b"  # compiled, but slower than the deadline (docs/performance.md)
HOSTILE = [TOO_COMPLEX, SLOW]
QUEUE = "fulfillment"


@pytest.mark.parametrize("pattern", HOSTILE, ids=["too-complex", "slow"])
def test_add_job_refuses_what_postgres_does_not_compile_in_time(
    client: Any, db: Db, schema: str, pattern: str
) -> None:
    before = Unchanged(db, schema)
    with pytest.raises(InvalidArgument) as refused:
        client.add_job(queue="render", data={}, preferred_instance_key_pattern=pattern)
    assert_refused(refused.value, "preferred_instance_key_pattern")
    assert "PostgreSQL" in str(refused.value)
    before.assert_unchanged()


def test_a_recurring_add_is_checked_too(client: Any, db: Db, schema: str) -> None:
    before = Unchanged(db, schema)
    with pytest.raises(InvalidArgument) as refused:
        client.add_job(queue="render", data={}, schedule={"start_every_seconds": 60},
                       preferred_instance_key_pattern=TOO_COMPLEX)
    assert_refused(refused.value, "preferred_instance_key_pattern")
    before.assert_unchanged()


def test_add_jobs_names_the_entry_and_adds_none(client: Any, db: Db, schema: str) -> None:
    before = Unchanged(db, schema)
    jobs = [{"data": n, "preferred_instance_key_pattern": "ram-8gb"} for n in range(3)]
    jobs += [{"data": 3, "preferred_instance_key_pattern": "^test-"},
             {"data": 4, "preferred_instance_key_pattern": SLOW},
             {"data": 5, "preferred_instance_key_pattern": SLOW}]
    with pytest.raises(InvalidArgument) as refused:
        client.add_jobs(queue="render", jobs=jobs)
    assert_refused(refused.value, "jobs[4].preferred_instance_key_pattern")
    before.assert_unchanged()


def test_a_large_batch_with_a_pattern_is_checked_before_anything_is_inserted(
    client: Any, db: Db, schema: str
) -> None:
    # Past operations.STREAM_CHUNK a batch is streamed in chunks; one naming
    # a pattern is not, so the refusal comes before any chunk is inserted.
    jobs: list[dict[str, Any]] = [{"data": n} for n in range(operations.STREAM_CHUNK * 3)]
    jobs[-1]["preferred_instance_key_pattern"] = TOO_COMPLEX
    before = Unchanged(db, schema)
    with pytest.raises(InvalidArgument) as refused:
        client.add_jobs(queue="render", jobs=jobs)
    assert_refused(refused.value, f"jobs[{len(jobs) - 1}].preferred_instance_key_pattern")
    before.assert_unchanged()


def test_accepted_patterns_are_stored(client: Any, db: Db, schema: str) -> None:
    one = client.add_job(queue="render", data={}, preferred_instance_key_pattern="(a{0,9}){3}b")
    many = client.add_jobs(queue="render", jobs=[
        {"data": n, "preferred_instance_key_pattern": f"^host-{n % 2}"} for n in range(4)])
    assert one.job_id and all(added.job_id for added in many)
    assert count_jobs(db, schema, "preferred_instance_key_pattern IS NOT NULL") == 5
    # The check's deadline was its own: the client's sessions keep their setting.
    assert client.get_job(job_id=one.job_id) is not None


def test_a_refusal_leaves_the_callers_transaction_usable(
    caller: CallerTransaction, db: Db, schema: str
) -> None:
    caller.begin()
    ((timeout,),) = caller.execute("SHOW statement_timeout")
    caller.write_order("order-1")
    for pattern in HOSTILE:
        with pytest.raises(InvalidArgument) as refused:
            caller.client.add_job(queue=QUEUE, data={}, preferred_instance_key_pattern=pattern,
                                  tx=caller.tx)
        assert_refused(refused.value, "preferred_instance_key_pattern")
    with pytest.raises(InvalidArgument) as refused:
        caller.client.add_jobs(queue=QUEUE, tx=caller.tx, jobs=[
            {"data": 1, "preferred_instance_key_pattern": "ram"},
            {"data": 2, "preferred_instance_key_pattern": TOO_COMPLEX}])
    assert_refused(refused.value, "jobs[1].preferred_instance_key_pattern")
    kept = caller.client.add_job(queue=QUEUE, data={}, preferred_instance_key_pattern="ram-8gb",
                                 tx=caller.tx)

    # Not aborted, and the deadline the check set is gone with its savepoint.
    assert caller.execute("SELECT 1") == [(1,)]
    assert caller.execute("SHOW statement_timeout") == [(timeout,)]
    caller.write_order("order-2")
    assert caller.in_transaction()
    caller.commit()

    assert count_jobs(db, schema) == 1
    assert count_jobs(db, schema, f"id = '{kept.job_id}'") == 1
    assert count_orders(db) == 2


def test_the_cli_refuses_it_as_a_usage_error(pg_dsn: str, schema: str, db: Db,
                                             tmp_path: Path) -> None:
    cli = Cli(pg_dsn, schema)
    result = cli("add", "render", "{}", "--create-queue", "--instance-key", "host-1",
                 "--preferred-instance-key-pattern", TOO_COMPLEX)
    assert result.exit_code == 2, result.output
    assert "--preferred-instance-key-pattern" in result.stderr
    lines = tmp_path / "jobs.jsonl"
    lines.write_text("\n".join(json.dumps(
        {"data": n, **({"preferred_instance_key_pattern": SLOW} if n == 2 else {})})
        for n in range(3)) + "\n")
    result = cli("add", "render", "--create-queue", "--file", str(lines),
                 "--instance-key", "host-1")
    assert result.exit_code == 2, result.output
    assert "line 3" in result.stderr and "preferred_instance_key_pattern" in result.stderr
    assert count_jobs(db, schema) == 0


# --- the cost: nothing when no pattern is given ---


def _first_statement(options: dict[str, Any]) -> Query | Batch:
    settings = client_settings(
        "postgresql://localhost/x", schema="portqueue", instance_key="host-1",
        max_payload_bytes=1024, pool_min_size=1, pool_max_size=1, poll_only=False,
        application_name="portqueue", default_retention_seconds=60)
    return next(operations.add_job(settings, {"queue": "render", **options}))


def test_an_add_without_a_pattern_sends_no_check() -> None:
    first = _first_statement({"data": {}})
    assert isinstance(first, Query) and first.name == "add_job_to_open_queue"
    first = _first_statement({"data": {}, "priority": 3, "group_id": "g"})
    assert isinstance(first, Query) and first.name == "add_job_to_open_queue"


def test_an_add_with_a_pattern_checks_it_first_in_a_savepoint() -> None:
    first = _first_statement({"data": {}, "preferred_instance_key_pattern": "ram"})
    assert isinstance(first, Batch)
    assert [query.name for query in first.queries] == [
        "begin_pattern_check", "pattern_check_deadline", "check_pattern"]


def test_a_producer_without_a_key_is_still_refused_locally(pg_dsn: str, schema: str) -> None:
    with PortQueue(pg_dsn, schema=schema) as keyless, pytest.raises(InvalidArgument) as refused:
        keyless.add_job(queue="render", data={}, preferred_instance_key_pattern="ram")
    assert_refused(refused.value, "preferred_instance_key_pattern")
