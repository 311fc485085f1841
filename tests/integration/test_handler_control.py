"""SPEC §10, handler control: ``raise Snooze(seconds=...)`` and ``raise
Cancel(reason)``, end to end through a real worker (and drain), on the
database clock, fenced like every other outcome."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest

from portqueue import AsyncPortQueue, Cancel, InvalidArgument, PortQueue, Snooze
from tests.support.rows import job_row, update_job
from tests.support.waiting import wait_until, wait_until_async
from tests.support.workers import AsyncHarness, SyncHarness, active, row_where

Db = psycopg.Connection[Any]


def test_snooze_puts_the_job_back_later_without_spending_an_attempt(
        pq: PortQueue, harness: SyncHarness, db: Db, schema: str) -> None:
    runs: list[int] = []

    @pq.task(queue="snoozy", retry={"max_attempts": 2})
    def snoozy(n: int) -> None:
        runs.append(n)
        raise Snooze(seconds=30)

    job_id = snoozy.add(n=1).job_id
    harness.start()
    row = wait_until(lambda: row_where(db, schema, job_id, "status = 'pending' AND "
                                       "start_after > now()"), what="the snooze")
    assert runs == [1]
    assert (row["attempt"], row["errors"], row["error"], row["finished_at"]) == (0, [], None,
                                                                                 None)
    # 30 s after the snooze was written, on the database clock.
    written = db.execute("SELECT now()").fetchone()[0]
    assert written - timedelta(seconds=31) < row["start_after"] - timedelta(seconds=30) <= written


def test_snooze_then_drain_with_scheduled_runs_it_again_with_its_attempts_intact(
        pq: PortQueue, db: Db, schema: str) -> None:
    attempts: list[int] = []

    @pq.handler("snooze-once")
    def snooze_once(job: Any) -> str:
        attempts.append(job.attempt)
        if len(attempts) == 1:
            raise Snooze(seconds=3600)
        return "done"

    job_id = pq.add_job(queue="snooze-once", data=None).job_id
    first = pq.drain()
    assert (first.snoozed, first.completed) == (1, 0)
    assert job_row(db, schema, job_id)["status"] == "pending"
    second = pq.drain(with_scheduled=True)
    assert (second.snoozed, second.completed) == (0, 1)
    row = job_row(db, schema, job_id)
    assert (row["status"], row["attempt"], row["output"]) == ("completed", 1, "done")
    assert attempts == [1, 1]


def test_cancel_ends_the_job_cancelled_with_its_reason_and_no_retry(
        pq: PortQueue, harness: SyncHarness, db: Db, schema: str) -> None:
    @pq.handler("cancelly", retry={"max_attempts": 5}, dead_letter_queue="cancelly-dead")
    def cancelly(job: Any) -> None:
        raise Cancel("customer closed the account")

    job_id = pq.add_job(queue="cancelly", data=1).job_id
    harness.start()
    row = wait_until(lambda: row_where(db, schema, job_id, "status = 'cancelled'"),
                     what="the cancel")
    assert row["attempt"] == 1 and row["error"] == "customer closed the account"
    snapshot = pq.get_job(job_id=job_id)
    assert [(e["type"], e["message"], e["attempt"]) for e in snapshot.errors] == [
        ("portqueue.control.Cancel", "customer closed the account", 1)]
    assert pq.get_jobs(queue="cancelly-dead").total == 0  # cancelled is not failed


async def test_async_handlers_snooze_and_cancel(aharness: AsyncHarness, db: Db,
                                                schema: str) -> None:
    apq: AsyncPortQueue = aharness.apq

    @apq.handler("a-snooze")
    async def snooze(job: Any) -> None:
        raise Snooze(seconds=5)

    @apq.handler("a-cancel")
    async def cancel(job: Any) -> None:
        raise Cancel("no")

    snoozed = (await apq.add_job(queue="a-snooze", data=1)).job_id
    cancelled = (await apq.add_job(queue="a-cancel", data=1)).job_id
    await aharness.start()
    await wait_until_async(lambda: row_where(db, schema, snoozed, "status = 'pending' AND "
                                             "attempt = 0 AND start_after > now()"),
                           what="the snooze")
    row = await wait_until_async(lambda: row_where(db, schema, cancelled,
                                                   "status = 'cancelled'"), what="the cancel")
    assert row["error"] == "no"


@pytest.mark.parametrize("raised", [Snooze(seconds=60), Cancel("late")])
def test_a_run_that_lost_its_lease_cannot_snooze_or_cancel(
        pq: PortQueue, harness: SyncHarness, db: Db, schema: str, raised: Exception) -> None:
    release = harness.gate()

    @pq.handler("fenced")
    def fenced(job: Any) -> None:
        release.wait(20)
        raise raised

    job_id = pq.add_job(queue="fenced", data=1).job_id
    harness.start()
    before = wait_until(active(db, schema, job_id), what="the claim")
    # Another claim superseded this run (as a rescue and a new claim would).
    update_job(db, schema, job_id, "lease_token = lease_token + 1")
    release.set()
    worker = pq._host.worker
    wait_until(lambda: not len(worker.jobs) and worker.completer.idle.is_set(),
               what="the outcome to be refused")
    row = job_row(db, schema, job_id)
    assert (row["status"], row["attempt"], row["errors"]) == ("active", 1, [])
    assert row["lease_token"] == before["lease_token"] + 1


def test_a_cancel_requested_while_snoozing_wins(pq: PortQueue, harness: SyncHarness, db: Db,
                                                schema: str) -> None:
    @pq.handler("cancel-wins")
    def handler(job: Any) -> None:
        job.signal.wait(20)
        raise Snooze(seconds=60)

    job_id = pq.add_job(queue="cancel-wins", data=1).job_id
    harness.start()
    wait_until(active(db, schema, job_id), what="the claim")
    pq.cancel_job(job_id=job_id)
    # The cancel's NOTIFY (or, poll_only, the next cancel poll) reaches the
    # handler within a second on a quiet machine; 5 s ran out at load 50.
    wait_until(lambda: row_where(db, schema, job_id, "status = 'cancelled'"),
               what="cancelled", timeout=20)


@pytest.mark.parametrize("seconds", [-1, float("nan"), "30", True, 366 * 24 * 3600])
def test_a_bad_snooze_is_refused_naming_seconds(seconds: Any) -> None:
    with pytest.raises(InvalidArgument) as refused:
        Snooze(seconds=seconds)
    assert refused.value.argument == "seconds"


def test_cancel_needs_a_text_reason() -> None:
    with pytest.raises(InvalidArgument) as refused:
        Cancel(42)  # type: ignore[arg-type]
    assert refused.value.argument == "reason"
    assert Cancel().reason == "cancelled by its handler"


@pytest.mark.parametrize("raised", [Snooze(seconds=60), Cancel("stop")])
def test_raising_inside_job_transaction_rolls_the_handlers_writes_back(
        pq: PortQueue, db: Db, schema: str, raised: Exception) -> None:
    db.execute("CREATE TABLE IF NOT EXISTS public.control_effects (n int)")
    db.execute("TRUNCATE public.control_effects")

    @pq.handler("in-tx")
    def handler(job: Any) -> None:
        with job.transaction() as conn:
            conn.execute("INSERT INTO public.control_effects VALUES (1)")
            raise raised

    job_id = pq.add_job(queue="in-tx", data=1).job_id
    result = pq.drain()
    assert (result.snoozed, result.cancelled) == ((1, 0) if isinstance(raised, Snooze)
                                                  else (0, 1))
    assert db.execute("SELECT count(*) FROM public.control_effects").fetchone()[0] == 0
    expected = "pending" if isinstance(raised, Snooze) else "cancelled"
    assert job_row(db, schema, job_id)["status"] == expected
    db.execute("DROP TABLE public.control_effects")
