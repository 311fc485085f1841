"""Retention and the references between rows (issue 16, item 9).

- A dead-letter copy's source is kept for as long as the copy exists,
  whatever its queue's retention says, so the failure's errors stay readable
  and the documented redrive, ``retry_job(job_id=copy.source_job_id)``, works.
- A schedule's last job, once pruned, is not reported as ``last_job_id``:
  neither ``get_schedules``, ``portqueue schedules --json`` nor the
  dashboard's schedules page names (or links to) a job that is gone.
- A copy's page links to its source only while the source exists (a
  ``remove_job`` can still delete it)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import psycopg
from psycopg import sql

from portqueue import AsyncPortQueue, JobStatus, PortQueue
from portqueue.dashboard import create_app
from portqueue.maintenance.pruner import Pruner
from tests.support.cli import Cli
from tests.support.rows import count_rows, fetch_one, finish, update_job
from tests.support.services import run_once
from tests.support.waiting import wait_until
from tests.support.workers import SyncHarness

Db = psycopg.Connection[Any]


class Boom(Exception):
    pass


def prune(dsn: str, schema: str) -> int:
    return int(run_once(Pruner, dsn, schema)[1])


def test_a_dead_letter_source_with_ttl_zero_survives_the_pruner_and_redrives(
    harness: SyncHarness, db: Db, pg_dsn: str, schema: str
) -> None:
    pq = harness.pq
    attempts: list[int] = []

    @pq.handler("fragile", retention={"ttl_seconds": 0}, dead_letter_queue="fragile-dead")
    def handler(job: Any) -> str:
        attempts.append(job.attempt)
        if len(attempts) == 1:
            raise Boom("the first run fails")
        return "redriven"

    harness.start()
    source_id = pq.add_job(queue="fragile", data={"n": 1}).job_id
    assert source_id
    copy_row = wait_until(lambda: fetch_one(db, schema, "job", "source_job_id = %s",
                                            [source_id]), what="the dead-letter copy")
    copy = pq.get_job(job_id=str(copy_row["id"]))
    assert copy is not None and copy.source_job_id == source_id

    prune(pg_dsn, schema)
    source = pq.get_job(job_id=copy.source_job_id)
    assert source is not None, "the pruner deleted the source of a dead-letter copy"
    assert source.status is JobStatus.FAILED
    assert [e["message"] for e in source.errors] == ["the first run fails"]

    redriven = pq.retry_job(job_id=copy.source_job_id)
    assert redriven is not None and redriven.job_id == source_id
    wait_until(lambda: fetch_one(db, schema, "job", "id = %s AND status = 'completed'",
                                 [source_id]), what="the redriven run")
    done = pq.get_job(job_id=source_id)
    assert done is not None and done.output == "redriven"
    # completed with ttl 0, and no copy names a completed job's run: it goes
    # (the copy of its failed run still names it, so it stays until that goes)
    prune(pg_dsn, schema)
    assert pq.get_job(job_id=source_id) is not None
    assert pq.remove_job(job_id=copy.job_id)
    prune(pg_dsn, schema)
    assert pq.get_job(job_id=source_id) is None


def test_a_source_goes_once_its_copies_have_gone(
    pq: PortQueue, db: Db, pg_dsn: str, schema: str
) -> None:
    db.execute(sql.SQL("INSERT INTO {} (name, retention_ttl_seconds, retention_keep_failed) "
                       "VALUES ('q', 0, 0)").format(sql.Identifier(schema, "queue")))
    source = pq.add_job(queue="q", data={}).job_id
    plain = pq.add_job(queue="q", data={}).job_id
    copy = pq.add_job(queue="q-dead", data={}).job_id
    assert source and plain and copy
    update_job(db, schema, copy, f"source_job_id = '{source}'")
    for job_id in (source, plain):
        finish(db, schema, job_id, "failed")

    # neither the ttl nor the count cap takes a source whose copy is there
    assert prune(pg_dsn, schema) == 1
    assert pq.get_job(job_id=plain) is None and pq.get_job(job_id=source) is not None
    assert pq.remove_job(job_id=copy)
    assert prune(pg_dsn, schema) == 1
    assert count_rows(db, schema, "job") == 0


def spawned_then_pruned(pq: PortQueue, db: Db, pg_dsn: str, schema: str) -> str:
    """A schedule whose last spawned job has been pruned (retention 0)."""
    added = pq.add_job(queue="reports", data={}, schedule={"start_every_seconds": 3600})
    assert added.schedule_id
    job_id = pq.add_job(queue="reports", data={}, retention={"ttl_seconds": 0}).job_id
    assert job_id
    update_job(db, schema, job_id, f"schedule_id = '{added.schedule_id}'")
    db.execute(sql.SQL("UPDATE {} SET last_job_id = %s, last_run_at = now() WHERE id = %s")
               .format(sql.Identifier(schema, "schedule")), [job_id, added.schedule_id])
    (info,) = pq.get_schedules(queue="reports").items
    assert info.last_job_id == job_id, "reported while the job exists"
    finish(db, schema, job_id, "completed")
    assert prune(pg_dsn, schema) == 1
    return job_id


def test_a_pruned_last_job_is_not_reported(
    pq: PortQueue, db: Db, pg_dsn: str, schema: str
) -> None:
    gone = spawned_then_pruned(pq, db, pg_dsn, schema)
    (info,) = pq.get_schedules(queue="reports").items
    assert info.last_job_id is None and info.last_run_at is not None

    out = Cli(pg_dsn, schema).json("schedules")
    (item,) = out["items"]
    assert item["last_job_id"] is None and gone not in str(out)


async def schedules_page(dsn: str, schema: str) -> httpx.Response:
    async with AsyncPortQueue(dsn, schema=schema) as apq:
        transport = httpx.ASGITransport(app=create_app(apq))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            return await http.get("/schedules")


def test_the_schedules_page_links_no_pruned_job(
    pq: PortQueue, db: Db, pg_dsn: str, schema: str
) -> None:
    gone = spawned_then_pruned(pq, db, pg_dsn, schema)
    page = asyncio.run(schedules_page(pg_dsn, schema))
    assert page.status_code == 200
    assert gone not in page.text and "/jobs/" + gone not in page.text
    assert "job no longer kept" in page.text


async def job_page(dsn: str, schema: str, job_id: str) -> httpx.Response:
    async with AsyncPortQueue(dsn, schema=schema) as apq:
        transport = httpx.ASGITransport(app=create_app(apq))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            return await http.get(f"/jobs/{job_id}")


def test_a_copys_page_links_its_source_only_while_it_exists(
    pq: PortQueue, db: Db, pg_dsn: str, schema: str
) -> None:
    source = pq.add_job(queue="q", data={}).job_id
    copy = pq.add_job(queue="q-dead", data={}).job_id
    assert source and copy
    update_job(db, schema, copy, f"source_job_id = '{source}'")
    assert f'href="/jobs/{source}"' in asyncio.run(job_page(pg_dsn, schema, copy)).text

    # retention keeps it, but a hand can remove it
    assert pq.remove_job(job_id=source)
    page = asyncio.run(job_page(pg_dsn, schema, copy))
    assert page.status_code == 200
    assert f"/jobs/{source}" not in page.text and source in page.text and "(removed)" in page.text
