"""The dashboard's "Remove queue" button (issue 18, item 5): shown for a queue
with no unfinished job, done as a browser does it (form + CSRF token), and
refused with a notice, nothing removed, when the queue has work left."""

from __future__ import annotations

from typing import Any

import httpx
import psycopg

from portqueue import AsyncPortQueue
from tests.dashboard.conftest import csrf_token
from tests.support.rows import queue_row, update_job

Db = psycopg.Connection[Any]


async def _post(dashboard: httpx.AsyncClient, path: str, **fields: str) -> httpx.Response:
    token = csrf_token((await dashboard.get("/jobs/new")).text)
    return await dashboard.post(path, data={"csrf_token": token, **fields})


def _row_of(page: str, queue: str) -> str:
    start = page.index(f'<tr data-queue="{queue}">')
    return page[start:page.index("</tr>", start)]


async def test_remove_queue_button(
    dashboard: httpx.AsyncClient, apq: AsyncPortQueue, db: Db, schema: str,
) -> None:
    busy = await apq.add_job(queue="busy", data={})
    done = await apq.add_job(queue="idle", data={})
    update_job(db, schema, str(done.job_id), "status = 'completed', finished_at = now()")
    page = (await dashboard.get("/")).text
    assert "Remove queue" in _row_of(page, "idle")
    assert "Remove queue" not in _row_of(page, "busy")

    removed = await _post(dashboard, "/queues/remove", queue="idle")
    assert removed.status_code == 303
    assert removed.headers["location"] == "/?notice=queue_removed"
    assert queue_row(db, schema, "idle") is None
    shown = (await dashboard.get(removed.headers["location"])).text
    assert "Queue removed" in shown and 'data-queue="idle"' not in shown

    refused = await _post(dashboard, "/queues/remove", queue="busy")
    assert refused.headers["location"] == "/?notice=queue_not_empty"
    assert "still has pending or active" in (await dashboard.get(refused.headers["location"])).text
    assert queue_row(db, schema, "busy") is not None
    assert await apq.get_job(job_id=str(busy.job_id)) is not None
    gone = await _post(dashboard, "/queues/remove", queue="idle")
    assert gone.headers["location"] == "/?notice=queue_not_removed"


async def test_remove_queue_needs_the_csrf_token(
    dashboard: httpx.AsyncClient, apq: AsyncPortQueue, db: Db, schema: str,
) -> None:
    await apq.pause_queue(queue="idle")
    forged = await dashboard.post("/queues/remove", data={"queue": "idle"})
    assert forged.status_code == 403
    assert queue_row(db, schema, "idle") is not None
