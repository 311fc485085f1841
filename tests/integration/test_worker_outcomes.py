"""SPEC §4 and §4.1, outcomes: output, retries per policy with every attempt's
error kept, backoff on the database clock, dont_autoretry_for, dead letters,
BaseException, unserialisable output, and timeouts whose late return is fenced.

End to end: the client adds, a real worker runs the handler, the row says what
happened."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any

import psycopg
import pytest

from portqueue import PortQueue
from tests.support.rows import count_rows, fetch_one, job_row, update_job
from tests.support.waiting import wait_until, wait_until_async
from tests.support.workers import (
    AsyncHarness,
    SyncHarness,
    finished_row,
    handler_transactions_open,
    row_where,
    wait_gate,
)

Db = psycopg.Connection[Any]
MODULE = __name__


class Boom(Exception):
    pass


class Fatal(Exception):
    pass


class VeryFatal(Fatal):
    pass


def effect_count(db: Db) -> int:
    row = db.execute("SELECT count(*) FROM public.worker_effects").fetchone()
    assert row is not None
    return int(row[0])


def at(error: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(error["at"])


def errors_of(db: Db, schema: str, job_id: str, count: int) -> Callable[[], Any]:
    """A predicate: the row once it holds ``count`` errors."""
    return lambda: row_where(db, schema, job_id, f"jsonb_array_length(errors) = {count:d}")


# --- output ---


def test_return_value_is_the_output_sync(harness: SyncHarness, db: Db, schema: str) -> None:
    pq = harness.pq

    @pq.handler("out")
    def handler(job: Any) -> Any:
        return {"echo": job.data, "list": [1, 2.5, None, "é"], "nested": {"ok": True}}

    @pq.handler("nothing")
    def nothing(job: Any) -> None:
        return None

    job_id = pq.add_job(queue="out", data={"x": 1}).job_id
    none_id = pq.add_job(queue="nothing", data={}).job_id
    assert job_id and none_id
    harness.start()
    row = wait_until(lambda: finished_row(db, schema, job_id), what="the job")
    assert row["status"] == "completed" and row["errors"] == []
    assert row["output"] == {"echo": {"x": 1}, "list": [1, 2.5, None, "é"], "nested": {"ok": True}}
    assert row["finished_at"] >= row["started_at"] and row["lease_expires_at"] is None
    row = wait_until(lambda: finished_row(db, schema, none_id), what="the None job")
    assert row["status"] == "completed" and row["output"] is None


async def test_return_value_is_the_output_async(
    aharness: AsyncHarness, db: Db, schema: str
) -> None:
    apq = aharness.apq

    @apq.handler("out")
    async def handler(job: Any) -> Any:
        await asyncio.sleep(0)
        return [job.data, "done"]

    job_id = (await apq.add_job(queue="out", data=7)).job_id
    assert job_id
    await aharness.start()
    row = await wait_until_async(lambda: finished_row(db, schema, job_id), what="the job")
    assert row["status"] == "completed" and row["output"] == [7, "done"]


# --- retries and errors ---


def test_a_raising_handler_is_retried_by_the_queue_policy_keeping_every_error(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    pq = harness.pq
    attempts: list[tuple[int, int]] = []

    @pq.handler("flaky", retry={"max_attempts": 3})
    def handler(job: Any) -> str:
        attempts.append((job.attempt, job.max_attempts))
        raise Boom(f"boom {job.attempt}")

    harness.start()  # writes the queue's policy, which later adds take
    job_id = pq.add_job(queue="flaky", data={}).job_id
    assert job_id
    row = wait_until(lambda: finished_row(db, schema, job_id), what="the job to fail")
    assert row["status"] == "failed" and row["attempt"] == 3 and row["output"] is None
    assert attempts == [(1, 3), (2, 3), (3, 3)]
    errors = row["errors"]
    assert [e["attempt"] for e in errors] == [1, 2, 3]
    assert {e["type"] for e in errors} == {f"{MODULE}.Boom"}
    assert [e["message"] for e in errors] == ["boom 1", "boom 2", "boom 3"]
    assert all("raise Boom" in e["traceback"] and "Traceback" in e["traceback"] for e in errors)
    assert at(errors[0]) <= at(errors[1]) <= at(errors[2]) <= row["finished_at"]


async def test_an_async_raising_handler_is_retried_by_the_job_policy(
    aharness: AsyncHarness, db: Db, schema: str
) -> None:
    apq = aharness.apq
    attempts: list[int] = []

    @apq.handler("flaky", retry={"max_attempts": 5})
    async def handler(job: Any) -> str:
        attempts.append(job.attempt)
        if job.attempt < 2:
            raise Boom("first try")
        return "second try"

    await aharness.start()
    # The job's own policy (2 attempts) wins over the queue's (5).
    job_id = (await apq.add_job(queue="flaky", data={}, retry={"max_attempts": 2})).job_id
    assert job_id
    row = await wait_until_async(lambda: finished_row(db, schema, job_id), what="the job")
    assert row["status"] == "completed" and row["output"] == "second try"
    assert row["attempt"] == 2 and row["max_attempts"] == 2 and attempts == [1, 2]
    assert [(e["attempt"], e["type"], e["message"]) for e in row["errors"]] == [
        (1, f"{MODULE}.Boom", "first try")]


def test_job_policy_wins_over_queue_policy(harness: SyncHarness, db: Db, schema: str) -> None:
    pq = harness.pq
    calls: dict[str, int] = {}

    @pq.handler("policy", retry={"max_attempts": 4})
    def handler(job: Any) -> None:
        calls[job.data] = calls.get(job.data, 0) + 1
        raise Boom(job.data)

    harness.start()
    by_queue = pq.add_job(queue="policy", data="queue").job_id
    by_job = pq.add_job(queue="policy", data="job", retry={"max_attempts": 2}).job_id
    assert by_queue and by_job
    assert wait_until(lambda: finished_row(db, schema, by_queue), what="q")["attempt"] == 4
    assert wait_until(lambda: finished_row(db, schema, by_job), what="j")["attempt"] == 2
    assert calls == {"queue": 4, "job": 2}


def test_without_a_policy_a_failure_is_final(harness: SyncHarness, db: Db, schema: str) -> None:
    pq = harness.pq

    @pq.handler("once")
    def handler(job: Any) -> None:
        raise Boom("once")

    job_id = pq.add_job(queue="once", data={}).job_id
    assert job_id
    harness.start()
    row = wait_until(lambda: finished_row(db, schema, job_id), what="the job")
    assert row["status"] == "failed" and row["attempt"] == 1 and len(row["errors"]) == 1


# --- backoff, on the database clock ---


def test_backoff_delays_follow_the_policy(harness: SyncHarness, db: Db, schema: str) -> None:
    pq = harness.pq

    @pq.handler("backoff")
    def handler(job: Any) -> None:
        raise Boom(str(job.attempt))

    harness.start(poll_interval=0.05)
    policies: dict[str, tuple[dict[str, Any], list[int]]] = {
        "fixed": ({"max_attempts": 4, "delay_seconds": 30}, [30, 30, 30]),
        "linear": ({"max_attempts": 4, "delay_seconds": 30,
                    "backoff": {"strategy": "linear"}}, [30, 60, 90]),
        "exponential": ({"max_attempts": 4, "delay_seconds": 30,
                         "backoff": {"strategy": "exponential", "factor": 3,
                                     "max_delay_seconds": 200}}, [30, 90, 200]),
    }
    for name, (retry, expected) in policies.items():
        job_id = pq.add_job(queue="backoff", data=name, retry=retry).job_id
        assert job_id
        for attempt, delay in enumerate(expected, start=1):
            row = wait_until(errors_of(db, schema, job_id, attempt),
                             what=f"{name} attempt {attempt} to fail")
            assert row["status"] == "pending" and row["attempt"] == attempt
            # The failure's write set both from one now(): the delay is exact.
            waited = (row["start_after"] - at(row["errors"][-1])).total_seconds()
            assert waited == pytest.approx(delay, abs=0.001), f"{name} after {attempt}"
            # Not rerun during its delay: still pending with one error more.
            assert row_where(db, schema, job_id, "status = 'pending'") is not None
            update_job(db, schema, job_id, "start_after = now()")  # skip the wait
        row = wait_until(lambda: finished_row(db, schema, job_id), what=f"{name} to fail")  # noqa: B023
        assert row["status"] == "failed" and row["attempt"] == 4


def test_jittered_backoff_stays_within_half_to_full_delay(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    pq = harness.pq

    @pq.handler("jitter")
    def handler(job: Any) -> None:
        raise Boom("again")

    retry = {"max_attempts": 2, "delay_seconds": 100, "backoff": {"jitter": True}}
    ids = [r.job_id for r in pq.add_jobs(queue="jitter", jobs=[
        {"data": n, "retry": retry} for n in range(10)])]
    harness.start()
    waits = []
    for job_id in ids:
        assert job_id
        row = wait_until(errors_of(db, schema, job_id, 1), what="a first failure")
        waits.append((row["start_after"] - at(row["errors"][-1])).total_seconds())
    assert all(50 <= w <= 100 for w in waits), waits
    assert len(set(waits)) > 1, "jitter varies the delay"


# --- final failures ---


def test_dont_autoretry_for_fails_at_once(harness: SyncHarness, db: Db, schema: str) -> None:
    pq = harness.pq

    @pq.handler("strict", retry={"max_attempts": 5}, dont_autoretry_for=(Fatal,))
    def handler(job: Any) -> None:
        if job.data == "fatal":
            raise VeryFatal("no point retrying")  # a subclass counts too
        raise Boom("worth retrying")

    harness.start()
    fatal = pq.add_job(queue="strict", data="fatal").job_id
    other = pq.add_job(queue="strict", data="other").job_id
    assert fatal and other
    row = wait_until(lambda: finished_row(db, schema, fatal), what="the fatal job")
    assert row["status"] == "failed" and row["attempt"] == 1
    assert [e["type"] for e in row["errors"]] == [f"{MODULE}.VeryFatal"]
    row = wait_until(lambda: finished_row(db, schema, other), what="the other job")
    assert row["status"] == "failed" and row["attempt"] == 5


async def test_dont_autoretry_for_async(aharness: AsyncHarness, db: Db, schema: str) -> None:
    apq = aharness.apq

    @apq.handler("strict", retry={"max_attempts": 5}, dont_autoretry_for=(Fatal,))
    async def handler(job: Any) -> None:
        raise Fatal("stop")

    job_id = (await apq.add_job(queue="strict", data={})).job_id
    assert job_id
    await aharness.start()
    row = await wait_until_async(lambda: finished_row(db, schema, job_id), what="the job")
    assert row["status"] == "failed" and row["attempt"] == 1


def test_dead_letter_queue_gets_a_copy_of_failed_jobs(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    pq = harness.pq
    gate = harness.gate()
    dead: list[Any] = []

    @pq.handler("fragile", concurrency=2, retry={"max_attempts": 2},
                dead_letter_queue="fragile-dead", dont_autoretry_for=(Fatal,))
    def handler(job: Any) -> None:
        if job.attempt == 1 and job.data["kind"] == "retried":
            gate.wait(20)  # hold the first failure until the test has looked
        raise (Fatal if job.data["kind"] == "fatal" else Boom)(job.data["kind"])

    harness.start()
    retried = pq.add_job(queue="fragile", data={"kind": "retried", "n": 1}, priority=3,
                         group_id="g1").job_id
    fatal = pq.add_job(queue="fragile", data={"kind": "fatal", "n": 2}).job_id
    assert retried and fatal

    row = wait_until(lambda: finished_row(db, schema, fatal), what="the fatal job")
    assert row["status"] == "failed"
    assert count_rows(db, schema, "job", "source_job_id = %s", [retried]) == 0
    gate.set()
    row = wait_until(lambda: finished_row(db, schema, retried), what="the retried job")
    assert row["status"] == "failed" and row["attempt"] == 2

    for source_id, data in ((retried, {"kind": "retried", "n": 1}),
                            (fatal, {"kind": "fatal", "n": 2})):
        copy = fetch_one(db, schema, "job", "source_job_id = %s", [source_id])
        assert copy is not None, f"no dead-letter copy of {source_id}"
        assert copy["queue"] == "fragile-dead" and copy["status"] == "pending"
        assert copy["data"] == data and copy["id"] != source_id and copy["attempt"] == 0
        dead.append(copy)
    assert dead[0]["priority"] == 3 and dead[0]["group_id"] == "g1"
    assert count_rows(db, schema, "job", "queue = 'fragile-dead'") == 2
    assert count_rows(db, schema, "queue", "name = 'fragile-dead'") == 1
    snapshot = pq.get_job(job_id=str(dead[0]["id"]))
    assert snapshot is not None and snapshot.source_job_id == retried


# --- BaseException ---


@pytest.mark.parametrize("exception", [KeyboardInterrupt, SystemExit])
def test_base_exceptions_in_a_sync_handler_are_recorded(
    harness: SyncHarness, db: Db, schema: str, exception: type[BaseException]
) -> None:
    pq = harness.pq

    @pq.handler("base", retry={"max_attempts": 2})
    def handler(job: Any) -> str:
        if job.data == "raise":
            raise exception("from the handler")
        return "still working"

    harness.start()
    job_id = pq.add_job(queue="base", data="raise").job_id
    assert job_id
    row = wait_until(lambda: finished_row(db, schema, job_id), what="the raising job")
    assert row["status"] == "failed" and row["attempt"] == 2
    assert [(e["type"], e["message"]) for e in row["errors"]] == [
        (exception.__name__, "from the handler")] * 2
    # The worker lives on.
    assert pq.add_job_and_wait(queue="base", data="ok", timeout_seconds=5) == "still working"


async def test_cancelled_error_raised_by_an_async_handler_is_recorded(
    aharness: AsyncHarness, db: Db, schema: str
) -> None:
    apq = aharness.apq

    @apq.handler("base", retry={"max_attempts": 2})
    async def handler(job: Any) -> str:
        if job.data == "raise":
            raise asyncio.CancelledError("from the handler")
        return "still working"

    await aharness.start()
    job_id = (await apq.add_job(queue="base", data="raise")).job_id
    assert job_id
    row = await wait_until_async(lambda: finished_row(db, schema, job_id), what="the job")
    assert row["status"] == "failed" and row["attempt"] == 2
    assert [e["type"] for e in row["errors"]] == ["asyncio.exceptions.CancelledError"] * 2
    assert await apq.add_job_and_wait(queue="base", data="ok", timeout_seconds=5) == (
        "still working")


@pytest.mark.parametrize("exception", [KeyboardInterrupt, SystemExit])
async def test_base_exceptions_in_an_async_handler_are_recorded(
    aharness: AsyncHarness, db: Db, schema: str, exception: type[BaseException]
) -> None:
    apq = aharness.apq

    @apq.handler("base")
    async def handler(job: Any) -> str:
        if job.data == "raise":
            raise exception("from the handler")
        return "still working"

    await aharness.start()
    job_id = (await apq.add_job(queue="base", data="raise")).job_id
    assert job_id
    row = await wait_until_async(lambda: finished_row(db, schema, job_id), what="the job")
    assert row["status"] == "failed"
    assert row["errors"][0]["type"] == exception.__name__
    assert await apq.add_job_and_wait(queue="base", data="ok", timeout_seconds=5) == (
        "still working")


# --- output that cannot be stored ---


def test_output_that_is_not_json_fails_the_attempt_clearly(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    pq = harness.pq

    @pq.handler("bad-output", retry={"max_attempts": 2})
    def handler(job: Any) -> Any:
        if job.data == "set":
            return {"items": {1, 2}}
        return float("nan")

    harness.start()
    for data, words in (("set", "not JSON-serialisable"), ("nan", "not JSON")):
        job_id = pq.add_job(queue="bad-output", data=data).job_id
        assert job_id
        row = wait_until(lambda: finished_row(db, schema, job_id), what=f"the {data} job")  # noqa: B023
        assert row["status"] == "failed" and row["attempt"] == 2 and row["output"] is None
        for error in row["errors"]:
            assert error["type"] == "portqueue.errors.InvalidArgument"
            assert error["message"].startswith("output: ") and words in error["message"]


# --- timeouts ---


def test_a_timed_out_handler_frees_its_slot_and_its_late_return_is_fenced(
    harness: SyncHarness, db: Db, schema: str, effects: str
) -> None:
    pq = harness.pq
    gate = harness.gate()
    returned = threading.Event()
    reasons: list[str | None] = []

    @pq.handler("slow", concurrency=1, timeout_seconds=1)
    def handler(job: Any) -> str:
        if job.data != "stuck":
            return "quick"
        with job.transaction() as conn:
            conn.execute("INSERT INTO public.worker_effects VALUES (%s, 'late')", [job.id])
        gate.wait(20)  # ignores its signal
        reasons.append(job.signal.reason)
        returned.set()
        return "late"

    harness.start()
    stuck = pq.add_job(queue="slow", data="stuck").job_id
    assert stuck
    wait_until(lambda: row_where(db, schema, stuck, "status = 'active'"), what="the claim")
    quick = pq.add_job(queue="slow", data="quick").job_id
    assert quick

    row = wait_until(lambda: finished_row(db, schema, stuck), timeout=5, what="the timeout")
    assert row["status"] == "failed" and row["attempt"] == 1
    (error,) = row["errors"]
    assert error["type"] == "TimeoutError" and "timeout_seconds=1" in error["message"]
    assert 1.0 <= (at(error) - row["started_at"]).total_seconds() < 3.0
    # The slot is free although the handler still runs.
    done = wait_until(lambda: finished_row(db, schema, quick), what="the next job on the queue")
    assert done["status"] == "completed" and done["output"] == "quick"
    assert not returned.is_set()

    gate.set()
    wait_until(returned.is_set, what="the stuck handler to return")
    wait_until(lambda: handler_transactions_open(db) == 0, what="its transaction to end")
    after = job_row(db, schema, stuck)
    assert reasons == ["timeout"]
    assert {k: after[k] for k in ("status", "output", "errors", "finished_at", "attempt")} == {
        k: row[k] for k in ("status", "output", "errors", "finished_at", "attempt")}
    assert effect_count(db) == 0, "the late transaction was rolled back"


async def test_an_async_handler_past_its_timeout_is_failed_and_fenced(
    aharness: AsyncHarness, db: Db, schema: str
) -> None:
    apq = aharness.apq
    gate = aharness.gate()
    late: list[str] = []

    @apq.handler("slow", concurrency=1)
    async def handler(job: Any) -> str:
        if job.data != "stuck":
            return "quick"
        try:
            await wait_gate(gate)
        except asyncio.CancelledError:
            # A handler that refuses to stop: it keeps going after its cancel.
            late.append(str(job.signal.reason))
            await wait_gate(gate)
        late.append("returned")
        return "late"

    await aharness.start()
    stuck = (await apq.add_job(queue="slow", data="stuck", timeout_seconds=1)).job_id
    assert stuck
    await wait_until_async(lambda: row_where(db, schema, stuck, "status = 'active'"),
                           what="the claim")
    quick = (await apq.add_job(queue="slow", data="quick")).job_id
    assert quick
    row = await wait_until_async(lambda: finished_row(db, schema, stuck), timeout=5,
                                 what="the timeout")
    assert row["status"] == "failed" and row["errors"][0]["type"] == "TimeoutError"
    done = await wait_until_async(lambda: finished_row(db, schema, quick), what="next job")
    assert done["status"] == "completed"
    assert late == ["timeout"], "still running when the next job ran"
    gate.set()
    await wait_until_async(lambda: "returned" in late, what="the late return")
    assert job_row(db, schema, stuck)["status"] == "failed"
    assert job_row(db, schema, stuck)["output"] is None


def test_a_timed_out_attempt_is_retried_per_policy(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    pq = harness.pq
    gate = harness.gate()

    @pq.handler("slow", concurrency=2, retry={"max_attempts": 2}, timeout_seconds=1)
    def handler(job: Any) -> str:
        if job.attempt == 1:
            gate.wait(20)
        return f"attempt {job.attempt}"

    harness.start()
    job_id = pq.add_job(queue="slow", data={}).job_id
    assert job_id
    row = wait_until(lambda: finished_row(db, schema, job_id), timeout=5, what="the retry")
    assert row["status"] == "completed" and row["output"] == "attempt 2"
    assert [(e["attempt"], e["type"]) for e in row["errors"]] == [(1, "TimeoutError")]


def test_a_handler_timeout_bounds_jobs_added_before_the_queue_declared_it(
    harness: SyncHarness, db: Db, schema: str, pg_dsn: str
) -> None:
    """A job added by a producer without the handler, before any worker wrote
    the queue's defaults, stores no timeout; the worker's declared one still
    applies."""
    pq = harness.pq
    gate = harness.gate()

    @pq.handler("slow", timeout_seconds=1)
    def handler(job: Any) -> None:
        gate.wait(20)

    with PortQueue(pg_dsn, schema=schema) as producer:
        job_id = producer.add_job(queue="slow", data={}).job_id
    assert job_id
    assert job_row(db, schema, job_id)["timeout_seconds"] is None
    harness.start()
    row = wait_until(lambda: finished_row(db, schema, job_id), timeout=5, what="the timeout")
    assert row["status"] == "failed" and row["errors"][0]["type"] == "TimeoutError"


def test_failures_are_logged_by_default(
    harness: SyncHarness, db: Db, schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    pq = harness.pq

    @pq.handler("logged", retry={"max_attempts": 2})
    def handler(job: Any) -> None:
        raise Boom("worth a log line")

    caplog.set_level(logging.WARNING, logger="portqueue.worker")
    harness.start()
    job_id = pq.add_job(queue="logged", data={}).job_id
    assert job_id
    wait_until(lambda: finished_row(db, schema, job_id), what="the job to fail")
    wait_until(lambda: len([r for r in caplog.records if job_id in r.getMessage()]) >= 2,
               what="a line per failed attempt")
    records = [r for r in caplog.records if job_id in r.getMessage()]
    assert [r.levelno for r in records] == [logging.WARNING, logging.ERROR]
    assert "will retry" in records[0].getMessage()
    assert all("worth a log line" in r.getMessage() for r in records)


def test_handlers_stuck_past_their_timeout_do_not_starve_later_jobs_of_threads(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    """Sync handlers run on a thread pool: threads held by timed-out handlers
    that ignore their signal must not leave later jobs without a thread (they
    would time out without ever running)."""
    pq = harness.pq
    gate = harness.gate()
    ran: list[Any] = []

    @pq.handler("stuck", concurrency=5, timeout_seconds=1)
    def handler(job: Any) -> str:
        ran.append(job.data)
        if job.data != "quick":
            gate.wait(20)  # ignores its signal
        return "ran"

    harness.start()
    # More stuck handlers than the pool has threads beyond the concurrency.
    stuck = [r.job_id for r in pq.add_jobs(queue="stuck", jobs=[
        {"data": n} for n in range(10)])]
    for job_id in stuck:
        assert job_id
        row = wait_until(lambda: finished_row(db, schema, job_id), what="a timeout")  # noqa: B023
        assert row["errors"][0]["type"] == "TimeoutError"
    assert sorted(ran) == list(range(10)), "every stuck job's handler ran"
    quick = pq.add_job(queue="stuck", data="quick").job_id
    assert quick
    row = wait_until(lambda: finished_row(db, schema, quick), what="the quick job")
    assert "quick" in ran, "the handler never got a thread"
    assert row["status"] == "completed" and row["output"] == "ran"


def test_dead_letter_copies_take_the_dead_letter_queues_defaults(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    """A copy is a job added to the dead-letter queue: that queue's declared
    retry policy and timeout apply to it, as they would to any add."""
    pq = harness.pq
    attempts: list[int] = []

    @pq.handler("fragile", dead_letter_queue="fragile-dead")
    def handler(job: Any) -> None:
        raise Boom("to the dead letters")

    @pq.handler("fragile-dead", retry={"max_attempts": 2, "delay_seconds": 0},
                timeout_seconds=30)
    def redrive(job: Any) -> str:
        attempts.append(job.attempt)
        if job.attempt == 1:
            raise Boom("redrive hiccup")
        return "redriven"

    harness.start()
    job_id = pq.add_job(queue="fragile", data={"n": 1}).job_id
    assert job_id
    wait_until(lambda: finished_row(db, schema, job_id), what="the job to fail")
    copy = wait_until(lambda: fetch_one(db, schema, "job", "source_job_id = %s AND "
                                        "finished_at IS NOT NULL", [job_id]),
                      what="the dead-letter copy to be redriven")
    assert copy["max_attempts"] == 2 and copy["timeout_seconds"] == 30
    assert copy["status"] == "completed" and copy["output"] == "redriven"
    assert attempts == [1, 2]
