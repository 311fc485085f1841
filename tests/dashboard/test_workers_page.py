"""The workers page: live worker rows with their running jobs, against a real worker."""

from __future__ import annotations

import os
import re
import socket
import threading
from typing import Any

import httpx
import psycopg
from markupsafe import escape

from portqueue import AsyncPortQueue, PortQueue
from tests.dashboard.worker_rows import insert_worker
from tests.support.waiting import wait_until

Db = psycopg.Connection[Any]


def _worker_rows(page: str) -> list[str]:
    return re.findall(r'<tr data-worker-id="([0-9a-f-]+)"', page)


async def test_a_running_worker_is_listed_with_its_running_job(
    dashboard: httpx.AsyncClient, apq: AsyncPortQueue, pg_dsn: str, schema: str,
) -> None:
    release = threading.Event()
    started = threading.Event()

    def holds(job: Any) -> None:
        started.set()
        release.wait(20)

    with PortQueue(pg_dsn, schema=schema) as pq:
        pq.create_queue(queue="reports", handler=holds, concurrency=4)
        pq.start(maintenance=False, scheduler=False, poll_interval=0.2)
        try:
            pq.add_job(queue="reports", data={})
            wait_until(started.is_set, timeout=15, what="the job to start")
            response = await dashboard.get("/workers")
            assert response.status_code == 200
            (row,) = re.findall(r"<tr data-worker-id=.*?</tr>", response.text, re.S)
            cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
            assert cells[0] == escape(socket.gethostname())
            assert cells[1] == str(os.getpid())
            assert ">reports</a>" in cells[2]
            assert cells[3] == "4"  # concurrency
            assert cells[4] == "1"  # running
        finally:
            release.set()
            pq.stop()
    # Stopped: the worker unregisters itself.
    assert _worker_rows((await dashboard.get("/workers")).text) == []


async def test_stale_workers_are_marked_and_hostile_names_escaped(
    dashboard: httpx.AsyncClient, db: Db, schema: str,
) -> None:
    fresh = insert_worker(db, schema, hostname="a-host", queues=["<b>q</b>"])
    stale = insert_worker(db, schema, hostname="<script>x()</script>",
                           seen_ago_seconds=600)
    response = await dashboard.get("/workers")
    body = response.text
    assert sorted(_worker_rows(body)) == sorted([fresh, stale])
    assert "<script>x()" not in body and "&lt;script&gt;x()&lt;/script&gt;" in body
    assert "<b>q</b>" not in body
    assert re.search(rf'data-worker-id="{stale}" class="stale"', body)
    assert not re.search(rf'data-worker-id="{fresh}" class="stale"', body)


async def test_no_workers_says_so(dashboard: httpx.AsyncClient, schema: str) -> None:
    response = await dashboard.get("/workers")
    assert response.status_code == 200
    assert "No worker is registered" in response.text


async def test_workers_page_needs_credentials(dashboard_app: Any, schema: str) -> None:
    from tests.dashboard.conftest import http_client

    async with http_client(dashboard_app) as anonymous:
        assert (await anonymous.get("/workers")).status_code == 401
