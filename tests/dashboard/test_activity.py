"""The activity page: throughput, failure rate and start latency per interval
as inline SVG, computed by the database from the job rows."""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta
from typing import Any

import httpx
import psycopg
import pytest

from portqueue import PortQueue
from tests.dashboard.conftest import run_job
from tests.support.rows import db_now, update_job

Db = psycopg.Connection[Any]
SCRIPT = "<script>window.__pwned=1</script>"


def _settle(db: Db, schema: str, job_id: str, status: str, minutes_ago: int,
            latency_seconds: float) -> None:
    """Started and finished ``minutes_ago`` whole minutes before this one, plus 10 s."""
    at = f"date_trunc('minute', now()) - interval '{minutes_ago} min' + interval '10 s'"
    update_job(db, schema, job_id,
               f"status = '{status}', attempt = 1, started_at = {at}, finished_at = {at}, "
               f"start_after = {at} - interval '{latency_seconds} s', created_at = {at} "
               f"- interval '1 min'")


def _bar_titles(page: str, chart: str) -> list[str]:
    svg = re.search(rf'<svg id="{chart}".*?</svg>', page, re.S)
    assert svg is not None, chart
    return re.findall(r"<title>(.*?)</title>", svg.group(0))


def _svg(page: str, chart: str) -> str:
    svg = re.search(rf'<svg id="{chart}".*?</svg>', page, re.S)
    assert svg is not None, chart
    return svg.group(0)


async def test_counts_rates_and_latency_land_in_their_minute(
    dashboard: httpx.AsyncClient, pq: PortQueue, db: Db, schema: str,
) -> None:
    ids = [str(r.job_id) for r in pq.add_jobs(queue="mail", jobs=[{"data": n} for n in range(6)])]
    for job_id in ids[:3]:
        _settle(db, schema, job_id, "completed", 2, 2.0)
    _settle(db, schema, ids[3], "failed", 2, 4.0)
    _settle(db, schema, ids[4], "completed", 5, 1.0)
    other = str(pq.add_job(queue="sms", data={}).job_id)
    _settle(db, schema, other, "failed", 5, 0.5)
    minute = (db_now(db).replace(second=0, microsecond=0))
    two, five = ((minute - timedelta(minutes=m)).strftime("%H:%M") for m in (2, 5))

    page = (await dashboard.get("/activity")).text
    assert sorted(_bar_titles(page, "throughput-chart")) == sorted([
        f"{two} UTC: 3 completed", f"{two} UTC: 1 failed",
        f"{five} UTC: 1 completed", f"{five} UTC: 1 failed"])
    assert ("<strong>4</strong> completed, <strong>2</strong> failed (33.3 %)"
            in page)
    # p95 of the latencies 2, 2, 2, 4 s (percentile_cont): 3.7 s.
    assert "worst p95 start latency 3.7 s" in page
    # One line (or dot) per measured run; the rest of the hour is a gap.
    assert _svg(page, "failure-rate-chart").count('class="dot failed"') == 2
    assert _svg(page, "latency-chart").count('class="dot p95"') == 2

    mail = (await dashboard.get("/activity", params={"queue": "mail"})).text
    assert sorted(_bar_titles(mail, "throughput-chart")) == sorted([
        f"{two} UTC: 3 completed", f"{two} UTC: 1 failed",
        f"{five} UTC: 1 completed"])
    assert "<strong>4</strong> completed, <strong>1</strong> failed (20.0 %)" in mail


async def test_a_real_worker_shows_up_in_the_current_minute(
    dashboard: httpx.AsyncClient, pg_dsn: str, schema: str,
) -> None:
    await asyncio.to_thread(run_job, pg_dsn, schema, queue="live", data={},
                            handler=lambda job: None)
    page = (await dashboard.get("/activity", params={"span": "6h"})).text
    titles = _bar_titles(page, "throughput-chart")
    assert len(titles) == 1 and titles[0].endswith("UTC: 1 completed")
    assert "one bar per 5 minutes" in page
    assert 'class="dot p95"' in _svg(page, "latency-chart")


async def test_an_idle_database_draws_empty_charts(
    dashboard: httpx.AsyncClient, schema: str,
) -> None:
    page = (await dashboard.get("/activity", params={"span": "24h"})).text
    assert "<strong>0</strong> completed, <strong>0</strong> failed." in page
    for chart in ("throughput-chart", "failure-rate-chart", "latency-chart"):
        svg = _svg(page, chart)
        assert "<rect" not in svg and "<polyline" not in svg
        assert svg.count('class="axis"') >= 5  # the axis labels are still drawn


@pytest.mark.parametrize(("query", "named"), [
    ({"span": "7d"}, "span"), ({"queue": "q" * 129}, "queue"), ({"refresh": "1"}, "refresh")])
async def test_bad_parameters_are_a_400(
    dashboard: httpx.AsyncClient, schema: str, query: dict[str, str], named: str,
) -> None:
    response = await dashboard.get("/activity", params=query)
    assert response.status_code == 400 and named in response.text


async def test_hostile_queue_names_are_escaped(
    dashboard: httpx.AsyncClient, pq: PortQueue, schema: str,
) -> None:
    pq.add_job(queue=SCRIPT, data={})
    page = (await dashboard.get("/activity", params={"queue": SCRIPT})).text
    assert SCRIPT not in page and "&lt;script&gt;" in page
