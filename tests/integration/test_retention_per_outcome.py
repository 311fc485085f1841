"""Retention per outcome (issue 18, item 13; the removeOnComplete /
removeOnFail of 000_28e42531148dd593.txt): separate ages for completed jobs
and for failed ones (failed, cancelled and expired), per job, per queue and
as a client default; a client-wide count cap; an explicit keep-forever
(``FOREVER``). Against real PostgreSQL: jobs run by a real worker where the
outcome matters, finished rows aged with test-written SQL (the state time
would leave), then the public ``run_pass`` prunes."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from psycopg import sql

from portqueue import FOREVER, AsyncPortQueue, InvalidArgument, PortQueue, Retention
from portqueue.maintenance import run_pass
from portqueue.maintenance.scheduler import Scheduler
from tests.support.rows import count_rows, finish, job_row, set_queue, update_job
from tests.support.services import run_once
from tests.support.waiting import wait_until
from tests.support.workers import SyncHarness, finished_row

Db = psycopg.Connection[Any]
DAY = 86_400
# Older than FOREVER seconds (about 68 years): only an explicit "never" keeps it.
CENTURY = 100 * 365 * DAY


class Boom(Exception):
    pass


def aged(db: Db, schema: str, job_id: str, seconds: int) -> None:
    update_job(db, schema, job_id, f"finished_at = now() - make_interval(secs => {seconds})")


def finished(db: Db, schema: str, job_id: str, status: str, ago: int) -> None:
    finish(db, schema, job_id, status)
    aged(db, schema, job_id, ago)


def pruned(dsn: str, schema: str, **defaults: Any) -> int:
    return run_pass(dsn, schema=schema, **defaults)["pruner"]


def exists(db: Db, schema: str, job_id: str) -> bool:
    return count_rows(db, schema, "job", "id = %s", [job_id]) == 1


# --- end to end: a queue's per-outcome retention, declared by its handler ---


def test_a_queue_keeps_failures_forever_and_completions_a_minute(
    harness: SyncHarness, db: Db, pg_dsn: str, schema: str
) -> None:
    pq = harness.pq

    @pq.handler("outcomes", retention={"completed_ttl_seconds": 60,
                                       "failed_ttl_seconds": FOREVER})
    def run(job: Any) -> str:
        if job.data["fail"]:
            raise Boom("on purpose")
        return "done"

    harness.start()
    ok = pq.add_job(queue="outcomes", data={"fail": False}).job_id
    bad = pq.add_job(queue="outcomes", data={"fail": True}).job_id
    assert ok and bad
    wait_until(lambda: finished_row(db, schema, ok) and finished_row(db, schema, bad),
               what="the worker to finish both jobs")
    assert job_row(db, schema, ok)["status"] == "completed"
    assert job_row(db, schema, bad)["status"] == "failed"

    info = pq.get_queue(queue="outcomes")
    assert info is not None
    assert info.retention == Retention(completed_ttl_seconds=60, failed_ttl_seconds=FOREVER)

    # Both finished within the minute: nothing goes.
    assert pruned(pg_dsn, schema) == 0
    aged(db, schema, ok, 120)
    aged(db, schema, bad, CENTURY)
    assert pruned(pg_dsn, schema) == 1
    assert not exists(db, schema, ok)
    assert exists(db, schema, bad), "FOREVER: no age deletes it"


def test_cancelled_and_expired_jobs_follow_the_failed_outcome(
    pq: PortQueue, db: Db, pg_dsn: str, schema: str
) -> None:
    set_queue(db, schema, "classes",
              "retention_completed_ttl_seconds = 86400, retention_failed_ttl_seconds = 60")
    jobs = {status: pq.add_job(queue="classes", data={}).job_id
            for status in ("completed", "failed", "cancelled", "expired")}
    for status, job_id in jobs.items():
        assert job_id
        finished(db, schema, job_id, status, 120)
    assert pruned(pg_dsn, schema) == 3
    assert [s for s, job_id in jobs.items() if exists(db, schema, job_id)] == ["completed"]


# --- per job ---


def test_a_jobs_own_outcome_ttl_wins_over_its_ttl_and_its_queues(
    pq: PortQueue, db: Db, pg_dsn: str, schema: str
) -> None:
    set_queue(db, schema, "own", "retention_ttl_seconds = 0")
    both = {"ttl_seconds": 0, "failed_ttl_seconds": DAY}
    completed = pq.add_job(queue="own", data={}, retention=both).job_id
    failed = pq.add_job(queue="own", data={}, retention=both).job_id
    kept_completed = pq.add_job(queue="own", data={},
                                retention=Retention(completed_ttl_seconds=DAY)).job_id
    dropped_failed = pq.add_job(queue="own", data={},
                                retention=Retention(completed_ttl_seconds=DAY)).job_id
    assert completed and failed and kept_completed and dropped_failed
    finished(db, schema, completed, "completed", 5)
    finished(db, schema, failed, "failed", 5)
    finished(db, schema, kept_completed, "completed", 5)
    finished(db, schema, dropped_failed, "failed", 5)

    assert pruned(pg_dsn, schema) == 2
    # ttl 0 for a completion; a day for a failure (its outcome's ttl wins)
    assert not exists(db, schema, completed) and exists(db, schema, failed)
    # a completed ttl says nothing of failures: those take the queue's 0
    assert exists(db, schema, kept_completed) and not exists(db, schema, dropped_failed)

    snapshot = pq.get_job(job_id=failed)
    assert snapshot is not None
    assert (snapshot.retention_ttl_seconds, snapshot.retention_completed_ttl_seconds,
            snapshot.retention_failed_ttl_seconds) == (0, None, DAY)
    aged(db, schema, failed, 2 * DAY)
    assert pruned(pg_dsn, schema) == 1 and not exists(db, schema, failed)


def test_a_batch_and_a_schedule_carry_the_outcome_ttls(
    pq: PortQueue, db: Db, pg_dsn: str, schema: str
) -> None:
    added = pq.add_jobs(queue="batch", jobs=[
        {"data": 1}, {"data": 2, "retention": {"completed_ttl_seconds": 7}},
        {"data": 3, "retention": {"failed_ttl_seconds": FOREVER}}])
    rows = [job_row(db, schema, str(r.job_id)) for r in added]
    assert [(r["retention_completed_ttl_seconds"], r["retention_failed_ttl_seconds"])
            for r in rows] == [(None, None), (7, None), (None, FOREVER)]

    recurring = pq.add_job(queue="batch", data={}, schedule={"start_every_seconds": 60},
                           retention={"completed_ttl_seconds": 30, "failed_ttl_seconds": 90})
    template = db.execute(sql.SQL("SELECT job_options FROM {} WHERE id = %s").format(
        sql.Identifier(schema, "schedule")), [recurring.schedule_id]).fetchone()
    assert template is not None
    assert template[0]["retention_completed_ttl_seconds"] == 30
    assert template[0]["retention_failed_ttl_seconds"] == 90
    # The tick is due now: the scheduler spawns a job carrying both.
    db.execute(sql.SQL("UPDATE {} SET next_run_at = now() WHERE id = %s").format(
        sql.Identifier(schema, "schedule")), [recurring.schedule_id])
    assert run_once(Scheduler, pg_dsn, schema)[1] == 1
    spawned = db.execute(sql.SQL(
        "SELECT retention_completed_ttl_seconds, retention_failed_ttl_seconds FROM {} "
        "WHERE schedule_id = %s").format(sql.Identifier(schema, "job")),
        [recurring.schedule_id]).fetchall()
    assert spawned == [(30, 90)]


# --- the client's defaults ---


def test_the_client_default_per_outcome_sits_under_the_queues_ttl(
    pq: PortQueue, db: Db, pg_dsn: str, schema: str
) -> None:
    defaults = {"default_retention_seconds": DAY,
                "default_retention": {"completed_ttl_seconds": 60}}
    completed = pq.add_job(queue="plain", data={}).job_id
    failed = pq.add_job(queue="plain", data={}).job_id
    queue_says = pq.add_job(queue="day", data={}).job_id
    set_queue(db, schema, "day", "retention_ttl_seconds = 86400")
    assert completed and failed and queue_says
    finished(db, schema, completed, "completed", 120)
    finished(db, schema, failed, "failed", 120)
    finished(db, schema, queue_says, "completed", 120)

    assert pruned(pg_dsn, schema, **defaults) == 1
    assert not exists(db, schema, completed)
    assert exists(db, schema, failed), "failures take default_retention_seconds (a day)"
    assert exists(db, schema, queue_says), "a queue's own ttl is nearer than the client's"


def test_a_client_wide_count_cap_applies_to_queues_without_one(
    db: Db, pg_dsn: str, schema: str, pq: PortQueue
) -> None:
    capped: dict[str, list[str]] = {}
    set_queue(db, schema, "own-cap", "retention_keep_completed = 4")
    set_queue(db, schema, "no-cap", f"retention_keep_completed = {FOREVER}")
    for queue in ("default-cap", "own-cap", "no-cap"):
        capped[queue] = []
        for age in range(6):
            job_id = pq.add_job(queue=queue, data={}).job_id
            assert job_id
            finished(db, schema, job_id, "completed", 10 + age)  # the first is the newest
            capped[queue].append(job_id)
    failed = pq.add_job(queue="default-cap", data={}).job_id
    assert failed
    finished(db, schema, failed, "failed", 10)

    assert pruned(pg_dsn, schema, default_retention={"keep_completed": 2, "keep_failed": 0}) \
        == 4 + 2 + 1
    left = {queue: [exists(db, schema, job_id) for job_id in ids]
            for queue, ids in capped.items()}
    assert left == {"default-cap": [True] * 2 + [False] * 4,
                    "own-cap": [True] * 4 + [False] * 2,
                    "no-cap": [True] * 6}
    assert not exists(db, schema, failed)


def test_a_job_kept_forever_outlives_its_queues_count_cap(
    pq: PortQueue, db: Db, pg_dsn: str, schema: str
) -> None:
    set_queue(db, schema, "cap0", "retention_keep_completed = 0")
    forever = pq.add_job(queue="cap0", data={}, retention={"ttl_seconds": FOREVER}).job_id
    completed_forever = pq.add_job(queue="cap0", data={},
                                   retention={"completed_ttl_seconds": FOREVER}).job_id
    plain = pq.add_job(queue="cap0", data={}).job_id
    assert forever and completed_forever and plain
    for job_id in (forever, completed_forever, plain):
        finished(db, schema, job_id, "completed", CENTURY)
    assert pruned(pg_dsn, schema) == 1
    assert not exists(db, schema, plain)
    assert exists(db, schema, forever) and exists(db, schema, completed_forever)
    assert pruned(pg_dsn, schema) == 0


def test_the_async_client_takes_the_same_options(
    pg_dsn: str, schema: str, db: Db
) -> None:
    async def main() -> str:
        async with AsyncPortQueue(pg_dsn, schema=schema,
                                  default_retention={"failed_ttl_seconds": 60}) as apq:
            result = await apq.add_job(queue="a", data={},
                                       retention={"completed_ttl_seconds": FOREVER})
            snapshot = await apq.get_job(job_id=str(result.job_id))
            assert snapshot is not None
            assert snapshot.retention_completed_ttl_seconds == FOREVER
            return str(result.job_id)

    job_id = asyncio.run(main())
    assert job_row(db, schema, job_id)["retention_completed_ttl_seconds"] == FOREVER


# --- bad input: ValueError naming the argument, nothing written ---


@pytest.mark.parametrize(("retention", "argument"), [
    ({"completed_ttl_seconds": -1}, "retention.completed_ttl_seconds"),
    ({"failed_ttl_seconds": "7d"}, "retention.failed_ttl_seconds"),
    ({"failed_ttl_seconds": FOREVER + 1}, "retention.failed_ttl_seconds"),
    ({"failed_ttl_seconds": True}, "retention.failed_ttl_seconds"),
    ({"keep_failed": 3}, "retention"),
    ({"completed_ttl": 60}, "retention.completed_ttl"),
])
def test_a_bad_per_job_retention_is_refused_before_anything_is_written(
    pq: PortQueue, db: Db, schema: str, retention: dict[str, Any], argument: str
) -> None:
    with pytest.raises(InvalidArgument) as raised:
        pq.add_job(queue="refused", data={}, retention=retention)
    assert isinstance(raised.value, ValueError)
    assert raised.value.argument == argument
    with pytest.raises(InvalidArgument) as in_batch:
        pq.add_jobs(queue="refused", jobs=[{"data": 1}, {"data": 2, "retention": retention}])
    assert in_batch.value.argument == f"jobs[1].{argument}"
    assert count_rows(db, schema, "job") == 0
    assert count_rows(db, schema, "queue") == 0


def test_bad_queue_and_client_retention_name_their_argument(
    pq: PortQueue, pg_dsn: str, schema: str, db: Db
) -> None:
    with pytest.raises(InvalidArgument) as raised:
        pq.create_queue(queue="q", handler=lambda job: None,
                        retention={"failed_ttl_seconds": -5})
    assert raised.value.argument == "retention.failed_ttl_seconds"
    with pytest.raises(InvalidArgument) as raised:
        pq.handler("q", retention={"keep_completed": -1})(lambda job: None)
    assert raised.value.argument == "retention.keep_completed"
    for bad, argument in [({"ttl_seconds": 60}, "default_retention.ttl_seconds"),
                          ({"keep_failed": "all"}, "default_retention.keep_failed"),
                          ({"completed_ttl_seconds": -1},
                           "default_retention.completed_ttl_seconds"),
                          ([60], "default_retention")]:
        with pytest.raises(InvalidArgument) as raised:
            PortQueue(pg_dsn, schema=schema, default_retention=bad)  # type: ignore[arg-type]
        assert raised.value.argument == argument
        with pytest.raises(InvalidArgument):
            run_pass(pg_dsn, schema=schema, default_retention=bad)  # type: ignore[arg-type]
    assert count_rows(db, schema, "queue") == 0


# --- end to end: per job, and the client default in a worker's own pruner ---


def test_a_jobs_outcome_decides_which_of_its_ttls_applies(
    harness: SyncHarness, db: Db, pg_dsn: str, schema: str
) -> None:
    pq = harness.pq

    @pq.handler("per-job")
    def run(job: Any) -> str:
        if job.data["fail"]:
            raise Boom("on purpose")
        return "done"

    harness.start()
    keep_failures = {"completed_ttl_seconds": 0, "failed_ttl_seconds": DAY}
    completed = pq.add_job(queue="per-job", data={"fail": False}, retention=keep_failures).job_id
    failed = pq.add_job(queue="per-job", data={"fail": True}, retention=keep_failures).job_id
    dropped = pq.add_job(queue="per-job", data={"fail": True},
                         retention={"failed_ttl_seconds": 0}).job_id
    assert completed and failed and dropped
    wait_until(lambda: all(finished_row(db, schema, j) for j in (completed, failed, dropped)),
               what="the worker to finish the three jobs")
    assert pruned(pg_dsn, schema) == 2
    assert [exists(db, schema, j) for j in (completed, failed, dropped)] == [False, True, False]


def test_a_workers_pruner_applies_its_clients_default_per_outcome(
    pg_dsn: str, schema: str, db: Db
) -> None:
    with PortQueue(pg_dsn, schema=schema, default_retention_seconds=DAY,
                   default_retention={"completed_ttl_seconds": 60,
                                      "failed_ttl_seconds": 3600}) as pq:
        harness = SyncHarness(pq)
        jobs = {}
        for status, ago in [("completed", 120), ("failed", 120), ("expired", 7200)]:
            job_id = pq.add_job(queue="defaults", data={}).job_id
            assert job_id
            finished(db, schema, job_id, status, ago)
            jobs[status] = job_id
        pq.handler("defaults")(lambda job: None)
        try:
            # A worker's maintenance passes start at once; within a pass the
            # expired range comes after the failed one, so once the expired
            # job is gone the failed one has been judged.
            harness.start(maintenance=True)
            wait_until(lambda: not exists(db, schema, jobs["completed"])
                       and not exists(db, schema, jobs["expired"]),
                       what="the worker's pruner to apply the client's defaults")
            assert exists(db, schema, jobs["failed"])
        finally:
            harness.close()


def test_a_jobs_page_shows_its_ttls_per_outcome(pq: PortQueue, pg_dsn: str, schema: str) -> None:
    httpx = pytest.importorskip("httpx")
    from portqueue.dashboard import create_app

    job_id = pq.add_job(queue="page", data={}, retention={
        "completed_ttl_seconds": 3600, "failed_ttl_seconds": FOREVER}).job_id
    plain = pq.add_job(queue="page", data={}).job_id

    async def page(job_id: str) -> str:
        async with AsyncPortQueue(pg_dsn, schema=schema) as apq:
            transport = httpx.ASGITransport(app=create_app(apq))
            async with httpx.AsyncClient(transport=transport,
                                         base_url="http://127.0.0.1") as http:
                response = await http.get(f"/jobs/{job_id}")
                assert response.status_code == 200
                return str(response.text)

    text = asyncio.run(page(str(job_id)))
    assert "<dt>retention if completed</dt><dd>1.0 h</dd>" in text
    assert "<dt>retention if failed</dt><dd>forever</dd>" in text
    assert "retention if" not in asyncio.run(page(str(plain)))
