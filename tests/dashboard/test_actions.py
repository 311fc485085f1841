"""Each action, done the way a browser does it (form + CSRF token), against the real rows."""

from __future__ import annotations

from typing import Any

import httpx
import psycopg

from portqueue import AsyncPortQueue
from tests.dashboard.conftest import csrf_token, fail_job_async
from tests.support.rows import fetch_one, job_row, queue_row

Db = psycopg.Connection[Any]


async def _post(dashboard: httpx.AsyncClient, path: str, **fields: str) -> httpx.Response:
    token = csrf_token((await dashboard.get("/jobs/new")).text)
    return await dashboard.post(path, data={"csrf_token": token, **fields})


async def test_retry_cancel_remove(
    dashboard: httpx.AsyncClient, apq: AsyncPortQueue, db: Db, pg_dsn: str, schema: str,
) -> None:
    failed = await fail_job_async(pg_dsn, schema, queue="mail", data={}, message="boom")
    retried = await _post(dashboard, f"/jobs/{failed.job_id}/retry")
    assert retried.status_code == 303
    assert retried.headers["location"] == f"/jobs/{failed.job_id}?notice=retried"
    assert job_row(db, schema, failed.job_id)["status"] == "pending"
    shown = (await dashboard.get(retried.headers["location"])).text
    assert "Job re-armed" in shown and '<dd id="job-status">pending' in shown

    cancelled = await _post(dashboard, f"/jobs/{failed.job_id}/cancel")
    assert cancelled.headers["location"].endswith("?notice=cancelled")
    assert job_row(db, schema, failed.job_id)["status"] == "cancelled"
    again = await _post(dashboard, f"/jobs/{failed.job_id}/cancel")
    assert again.headers["location"].endswith("?notice=cancel_already_finished")

    removed = await _post(dashboard, f"/jobs/{failed.job_id}/remove")
    assert removed.headers["location"] == "/jobs?queue=mail&notice=removed"
    assert fetch_one(db, schema, "job", "id = %s", [failed.job_id]) is None
    gone = await _post(dashboard, f"/jobs/{failed.job_id}/retry")
    assert gone.headers["location"].endswith("?notice=not_retried")


async def test_pause_and_resume(
    dashboard: httpx.AsyncClient, apq: AsyncPortQueue, db: Db, schema: str,
) -> None:
    queue = "bills & <receipts>"
    await apq.add_job(queue=queue, data={})
    paused = await _post(dashboard, "/queues/pause", queue=queue, mode="all")
    assert paused.status_code == 303 and paused.headers["location"] == "/?notice=paused"
    assert queue_row(db, schema, queue)["paused"] == "all"  # type: ignore[index]
    assert "Queue paused." in (await dashboard.get(paused.headers["location"])).text
    await _post(dashboard, "/queues/resume", queue=queue)
    assert queue_row(db, schema, queue)["paused"] is None  # type: ignore[index]
    bad = await _post(dashboard, "/queues/pause", queue=queue, mode="forever")
    assert bad.status_code == 400 and "mode:" in bad.text
    assert queue_row(db, schema, queue)["paused"] is None  # type: ignore[index]


async def test_add_job_and_invalid_forms_write_nothing(
    dashboard: httpx.AsyncClient, apq: AsyncPortQueue, db: Db, schema: str,
) -> None:
    added = await _post(dashboard, "/jobs/new", queue="mail",
                        data='{"to": "a@b.com", "n": [1, 2]}', priority="5", group_id="g")
    assert added.status_code == 303
    job_id = added.headers["location"].split("/")[-1].split("?")[0]
    row = job_row(db, schema, job_id)
    assert (row["queue"], row["data"], row["priority"], row["group_id"]) == (
        "mail", {"to": "a@b.com", "n": [1, 2]}, 5, "g")

    for fields, named in [({"data": "{'single': 'quotes'}"}, "data"),
                          ({"data": "NaN"}, "data"),
                          ({"data": ""}, "data"),
                          ({"data": "{}", "priority": "high"}, "priority"),
                          ({"data": "{}", "queue": ""}, "queue")]:
        form = {"queue": "mail", **fields}
        refused = await _post(dashboard, "/jobs/new", **form)
        assert refused.status_code == 400, fields
        assert f"{named}:" in refused.text and 'id="form-error"' in refused.text
        assert (await apq.get_jobs(queue="mail")).total == 1

    await apq.pause_queue(queue="mail", mode="all")  # type: ignore[arg-type]
    paused = await _post(dashboard, "/jobs/new", queue="mail", data="{}")
    assert paused.status_code == 409 and "paused" in paused.text
    assert (await apq.get_jobs(queue="mail")).total == 1


async def test_remove_schedule(
    dashboard: httpx.AsyncClient, apq: AsyncPortQueue, db: Db, schema: str,
) -> None:
    added = await apq.add_job(queue="reports", data={}, schedule={"start_every_seconds": 60})
    assert added.schedule_id is not None
    listed = (await dashboard.get("/schedules")).text
    assert f'data-schedule-id="{added.schedule_id}"' in listed
    removed = await _post(dashboard, f"/schedules/{added.schedule_id}/remove")
    assert removed.headers["location"] == "/schedules?notice=schedule_removed"
    assert fetch_one(db, schema, "schedule", "id = %s", [added.schedule_id]) is None
    again = await _post(dashboard, f"/schedules/{added.schedule_id}/remove")
    assert again.headers["location"] == "/schedules?notice=schedule_not_removed"
