"""Flow control at add time and on the queue row (SPEC §8): throttle and debounce
under concurrent adds and through ``tx=``, partition keys, ``set_queue_limits``, the
limits a worker declares, and bad input refused before anything is written."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from portqueue import AddJobResult, Debounce, DeduplicationReason, PortQueue, RateLimit, Throttle
from portqueue.tx import from_psycopg
from tests.support.waiting import wait_until
from tests.support.workers import SyncHarness

Db = psycopg.Connection[Any]
ADDS = 50


def count_jobs(db: Db, schema: str, queue: str) -> int:
    (n,) = db.execute(sql.SQL("SELECT count(*) FROM {} WHERE queue = %s").format(
        sql.Identifier(schema, "job")), [queue]).fetchone() or (0,)
    return int(n)


def test_fifty_concurrent_throttled_adds_create_exactly_one_job(
    client: PortQueue, db: Db, schema: str,
) -> None:
    with ThreadPoolExecutor(ADDS) as pool:
        results = list(pool.map(lambda n: client.add_job(
            queue="t", data={"n": n}, throttle=Throttle(key="k", seconds=60)), range(ADDS)))
    assert count_jobs(db, schema, "t") == 1
    assert len({r.job_id for r in results}) == 1
    assert sum(not r.deduplicated for r in results) == 1
    assert {r.deduplication_reason for r in results if r.deduplicated} == {
        DeduplicationReason.THROTTLE}


def test_a_throttle_window_ends_and_the_next_add_creates_a_job(
    client: PortQueue, db: Db, schema: str,
) -> None:
    first = client.add_job(queue="t", data=1, throttle={"key": "k", "seconds": 1})
    again = client.add_job(queue="t", data=2, throttle={"key": "k", "seconds": 1})
    assert again.job_id == first.job_id and again.deduplicated
    other_key = client.add_job(queue="t", data=3, throttle={"key": "other", "seconds": 1})
    assert not other_key.deduplicated
    def add_after_window() -> AddJobResult | None:
        result = client.add_job(queue="t", data=4, throttle={"key": "k", "seconds": 1})
        return None if result.deduplicated else result

    later = wait_until(add_after_window, 5, "the window to end")
    assert later.job_id != first.job_id
    assert count_jobs(db, schema, "t") == 3


def test_fifty_concurrent_debounced_adds_keep_one_job_with_the_last_data(
    client: PortQueue, db: Db, schema: str,
) -> None:
    with ThreadPoolExecutor(ADDS) as pool:
        results = list(pool.map(lambda n: client.add_job(
            queue="d", data={"n": n}, debounce=Debounce(key="k", seconds=30)), range(ADDS)))
    assert count_jobs(db, schema, "d") == 1
    (job_id,) = {r.job_id for r in results}
    assert sum(not r.deduplicated for r in results) == 1
    # The start is the latest any add set; the data is one add's (the last to commit).
    job = client.get_job(job_id=str(job_id))
    assert job is not None and job.status.value == "pending"
    assert job.start_after == max(r.start_after for r in results if r.start_after)
    assert job.data in [{"n": n} for n in range(ADDS)]
    assert {r.deduplication_reason for r in results if r.deduplicated} == {
        DeduplicationReason.DEBOUNCE}


def test_fifty_concurrent_debounced_adds_keep_the_data_of_the_last_to_commit(
    client: PortQueue, pg_dsn: str,
) -> None:
    # Each add runs in a transaction of its own (tx=) and commits under a lock
    # that records the commit order, so "the last add" is known exactly.
    committed: list[int] = []
    commit_lock = threading.Lock()
    job_ids: set[str] = set()

    def add(n: int) -> None:
        with psycopg.connect(pg_dsn) as conn:
            result = client.add_job(queue="d", data={"n": n}, debounce=Debounce("k", 30),
                                    tx=from_psycopg(conn))
            with commit_lock:
                conn.commit()
                committed.append(n)
                job_ids.add(str(result.job_id))

    with ThreadPoolExecutor(ADDS) as pool:
        list(pool.map(add, range(ADDS)))
    assert len(committed) == ADDS and len(job_ids) == 1
    job = client.get_job(job_id=job_ids.pop())
    assert job is not None and job.status.value == "pending"
    assert job.data == {"n": committed[-1]}


def test_debounce_moves_start_after_on_the_database_clock_capped_by_max_wait(
    client: PortQueue, db: Db,
) -> None:
    first = client.add_job(queue="d", data="a", debounce=Debounce("k", 10, max_wait_seconds=15))
    assert first.created_at is not None and first.start_after is not None
    assert first.start_after - first.created_at == timedelta(seconds=10)
    db.execute("SELECT pg_sleep(0.2)")
    second = client.add_job(queue="d", data="b", debounce=Debounce("k", 10, max_wait_seconds=15))
    assert second.job_id == first.job_id
    assert second.start_after is not None and second.start_after > first.start_after
    # An add whose delay would pass first add + max_wait is capped there.
    capped = client.add_job(queue="d", data="c", debounce=Debounce("k", 20, max_wait_seconds=15))
    assert capped.start_after == first.created_at + timedelta(seconds=15)
    job = client.get_job(job_id=str(first.job_id))
    assert job is not None and job.data == "c"


def test_a_debounced_job_that_started_is_not_updated_the_next_add_makes_a_new_one(
    client: PortQueue, harness: SyncHarness, db: Db, schema: str,
) -> None:
    ran: list[Any] = []
    client.create_queue(queue="d", handler=lambda job: ran.append(job.data))
    first = client.add_job(queue="d", data="a", debounce=Debounce("k", 1))
    harness.start()
    wait_until(lambda: ran == ["a"], 10, "the debounced job to run")
    second = client.add_job(queue="d", data="b", debounce=Debounce("k", 1))
    assert second.job_id != first.job_id and not second.deduplicated
    wait_until(lambda: ran == ["a", "b"], 10, "the second job to run")


def test_throttle_and_debounce_join_the_callers_transaction(
    client: PortQueue, pg_dsn: str, db: Db, schema: str,
) -> None:
    with psycopg.connect(pg_dsn) as conn:
        client.add_job(queue="t", data=1, throttle=Throttle("k", 60), tx=from_psycopg(conn))
        client.add_job(queue="d", data=1, debounce=Debounce("k", 60), tx=from_psycopg(conn))
        conn.rollback()
    assert count_jobs(db, schema, "t") == count_jobs(db, schema, "d") == 0
    # The rolled-back window holds nothing back.
    assert not client.add_job(queue="t", data=2, throttle=Throttle("k", 60)).deduplicated
    with psycopg.connect(pg_dsn) as conn:
        results = client.add_jobs(queue="d", jobs=[
            {"data": 1, "debounce": Debounce("k", 60)}, {"data": 2},
            {"data": 3, "debounce": {"key": "k", "seconds": 60}}], tx=from_psycopg(conn))
        conn.commit()
    assert results[0].job_id == results[2].job_id and results[2].deduplicated
    assert not results[1].deduplicated
    assert count_jobs(db, schema, "d") == 2


def test_partition_key_is_stored_from_add_job_add_jobs_and_tx(
    client: PortQueue, pg_dsn: str, db: Db, schema: str,
) -> None:
    one = client.add_job(queue="p", data=1, partition_key="tenant:1")
    many = client.add_jobs(queue="p", jobs=[{"data": 2, "partition_key": "tenant:2"},
                                           {"data": 3}])
    with psycopg.connect(pg_dsn) as conn:
        in_tx = client.add_job(queue="p", data=4, partition_key="x" * 256,
                               tx=from_psycopg(conn))
        conn.commit()
    rows = dict(db.execute(sql.SQL("SELECT id::text, partition_key FROM {}").format(
        sql.Identifier(schema, "job"))).fetchall())
    assert rows == {one.job_id: "tenant:1", many[0].job_id: "tenant:2", many[1].job_id: None,
                    in_tx.job_id: "x" * 256}


def test_set_queue_limits_changes_only_what_it_names(client: PortQueue) -> None:
    info = client.set_queue_limits(queue="q", global_concurrency=5,
                                   rate_limit={"limit": 10, "period_seconds": 60})
    assert (info.global_concurrency, info.partition_concurrency) == (5, None)
    assert info.rate_limit == RateLimit(10, 60, False)
    info = client.set_queue_limits(queue="q", partition_concurrency=2)
    assert (info.global_concurrency, info.partition_concurrency) == (5, 2)
    assert info.rate_limit == RateLimit(10, 60, False)
    info = client.set_queue_limits(queue="q", global_concurrency=None, rate_limit=None)
    assert (info.global_concurrency, info.partition_concurrency, info.rate_limit) == (
        None, 2, None)
    stored = client.get_queue(queue="q")
    assert stored == info


def test_a_workers_start_writes_only_the_limits_its_code_declares(
    client: PortQueue, harness: SyncHarness,
) -> None:
    client.set_queue_limits(queue="q", partition_concurrency=4, global_concurrency=50)
    client.create_queue(queue="q", handler=lambda job: None, global_concurrency=7,
                        rate_limit=RateLimit(3, 10, per_partition=True))
    harness.start()
    info = client.get_queue(queue="q")
    assert info is not None
    assert (info.global_concurrency, info.partition_concurrency) == (7, 4)
    assert info.rate_limit == RateLimit(3, 10, True)


BAD_ADDS: list[tuple[dict[str, Any], str]] = [
    ({"partition_key": "x" * 257}, "partition_key"),
    ({"partition_key": 5}, "partition_key"),
    ({"throttle": {"key": "k"}}, "throttle.seconds"),
    ({"throttle": {"key": "k", "seconds": 0}}, "throttle.seconds"),
    ({"throttle": {"key": "", "seconds": 1}}, "throttle.key"),
    ({"throttle": "k"}, "throttle"),
    ({"debounce": {"key": "k", "seconds": -1}}, "debounce.seconds"),
    ({"debounce": {"key": "k", "seconds": 1, "max_wait_seconds": 0}},
     "debounce.max_wait_seconds"),
    ({"debounce": {"key": "k", "seconds": 1, "delay": 1}}, "debounce.delay"),
    ({"throttle": Throttle("k", 1), "debounce": Debounce("k", 1)}, "debounce"),
    ({"throttle": Throttle("k", 1), "idempotency_key": "i"}, "throttle"),
    ({"debounce": Debounce("k", 1), "singleton_key": "s"}, "debounce"),
    ({"debounce": Debounce("k", 1), "schedule": {"start_after_seconds": 5}}, "debounce"),
]


@pytest.mark.parametrize(("options", "argument"), BAD_ADDS)
def test_bad_flow_control_adds_name_the_argument_and_write_nothing(
    client: PortQueue, db: Db, schema: str, options: dict[str, Any], argument: str,
) -> None:
    with pytest.raises(ValueError, match=f"^{argument}"):
        client.add_job(queue="bad", data=1, **options)
    with pytest.raises(ValueError, match=rf"^jobs\[1\]\.{argument}"):
        client.add_jobs(queue="bad", jobs=[{"data": 0}, {"data": 1, **options}])
    assert count_jobs(db, schema, "bad") == 0


BAD_LIMITS: list[tuple[dict[str, Any], str]] = [
    ({"global_concurrency": 0}, "global_concurrency"),
    ({"partition_concurrency": "2"}, "partition_concurrency"),
    ({"rate_limit": {"limit": 0, "period_seconds": 1}}, "rate_limit.limit"),
    ({"rate_limit": {"limit": 1}}, "rate_limit.period_seconds"),
    ({"rate_limit": {"limit": 1, "period_seconds": 1, "per_partition": "yes"}},
     "rate_limit.per_partition"),
    ({"rate_limit": 5}, "rate_limit"),
]


@pytest.mark.parametrize(("options", "argument"), BAD_LIMITS)
def test_bad_limits_name_the_argument_and_write_nothing(
    client: PortQueue, db: Db, schema: str, options: dict[str, Any], argument: str,
) -> None:
    with pytest.raises(ValueError, match=f"^{argument}"):
        client.set_queue_limits(queue="bad", **options)
    with pytest.raises(ValueError, match=f"^{argument}"):
        client.create_queue(queue="bad", handler=lambda job: None, **options)
    assert client.get_queue(queue="bad") is None
