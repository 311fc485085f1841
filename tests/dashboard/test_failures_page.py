"""The failures page: every queue's failed jobs, newest first, the error in the list."""

from __future__ import annotations

import re
from typing import Any

import httpx
import psycopg

from portqueue import PortQueue
from tests.dashboard.conftest import fail_job_async, job_ids_listed
from tests.dashboard.failure_rows import add_failed

Db = psycopg.Connection[Any]
SCRIPT = "<script>window.__pwned=1</script>"


def _rows(page: str) -> list[str]:
    return re.findall(r'<tr data-job-id=.*?</tr>', page, re.S)


async def test_failures_of_every_queue_with_their_error_newest_first(
    dashboard: httpx.AsyncClient, pg_dsn: str, schema: str,
) -> None:
    first = await fail_job_async(pg_dsn, schema, queue="emails", data={},
                                 message="SMTP 554: mailbox unavailable")
    second = await fail_job_async(pg_dsn, schema, queue="reports", data={},
                                  message=f"template {SCRIPT} missing")
    response = await dashboard.get("/failures")
    assert response.status_code == 200
    body = response.text
    assert job_ids_listed(body) == [second.job_id, first.job_id]
    newest, oldest = _rows(body)
    assert "<strong>RuntimeError</strong>: template &lt;script&gt;" in newest
    assert ">reports</a>" in newest
    assert "SMTP 554: mailbox unavailable" in oldest and ">emails</a>" in oldest
    assert SCRIPT not in body

    only = await dashboard.get("/failures", params={"queue": "emails"})
    assert job_ids_listed(only.text) == [first.job_id]
    assert "Failures in" in only.text


async def test_only_failed_jobs_are_listed_and_paged(
    dashboard: httpx.AsyncClient, pq: PortQueue, db: Db, schema: str,
) -> None:
    failed = add_failed(pq, db, schema, queue="bulk", count=55)
    pq.add_job(queue="bulk", data="still pending")
    first = await dashboard.get("/failures")
    assert job_ids_listed(first.text) == failed[::-1][:50]
    assert "page 1 of 2 · 55 in all" in first.text
    second = await dashboard.get("/failures", params={"page": "2"})
    assert job_ids_listed(second.text) == failed[::-1][50:]


async def test_a_long_error_is_clipped_in_the_list(
    dashboard: httpx.AsyncClient, pq: PortQueue, db: Db, schema: str,
) -> None:
    add_failed(pq, db, schema, queue="long", count=1, message="x" * 5000)
    (row,) = _rows((await dashboard.get("/failures")).text)
    assert "x" * 299 + "…" in row and "x" * 300 not in row


async def test_no_failures_and_a_bad_queue(dashboard: httpx.AsyncClient, schema: str) -> None:
    empty = await dashboard.get("/failures")
    assert empty.status_code == 200 and "No failed jobs." in empty.text
    bad = await dashboard.get("/failures", params={"queue": "q" * 129})
    assert bad.status_code == 400 and "queue" in bad.text
