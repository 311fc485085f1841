"""The dashboard's bulk cancel through ``cancel_jobs`` (issue 21): running jobs
of the selection are signalled, not cancelled, and counted as acted on; the
pending ones end cancelled. Checked against the rows."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import psycopg

from portqueue import AsyncPortQueue
from tests.dashboard.bulk_forms import confirm_form, statuses
from tests.support.rows import job_row, make_active

Db = psycopg.Connection[Any]


async def test_bulk_cancel_signals_running_jobs_and_cancels_pending_ones(
    dashboard: httpx.AsyncClient, apq: AsyncPortQueue, db: Db, schema: str,
) -> None:
    pending = [str((await apq.add_job(queue="mail", data=n)).job_id) for n in range(2)]
    running = str((await apq.add_job(queue="mail", data="running")).job_id)
    make_active(db, schema, running)

    confirm = await dashboard.get("/bulk", params={"action": "cancel", "queue": "mail",
                                                   "back": "jobs"})
    assert "<h1>Cancel 3 jobs?</h1>" in confirm.text
    response = await dashboard.post("/bulk", data=confirm_form(confirm.text))
    assert response.status_code == 303
    query = parse_qs(urlsplit(response.headers["location"]).query)
    assert (query["count"], query["matched"]) == (["3"], ["3"])
    assert statuses(db, schema, pending) == ["cancelled", "cancelled"]
    row = job_row(db, schema, running)
    assert row["status"] == "active" and row["cancel_requested_at"] is not None
