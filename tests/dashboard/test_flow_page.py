"""The flow page: a flow drawn as a graph of its jobs with their statuses,
server-rendered, linked from each job of the flow; hostile keys escaped."""

from __future__ import annotations

import re

import httpx
from markupsafe import escape

from portqueue import AsyncPortQueue

SCRIPT = "<script>window.__pwned=1</script>"


async def test_a_flow_is_a_graph_of_its_jobs_linked_from_each_job(
    dashboard: httpx.AsyncClient, apq: AsyncPortQueue,
) -> None:
    flow = await apq.add_flow(jobs=[
        {"key": "extract", "queue": "etl", "data": 1},
        {"key": "t1", "queue": "etl", "data": 2, "depends_on": ["extract"]},
        {"key": SCRIPT, "queue": "etl", "data": 3, "depends_on": ["extract"]},
        {"key": "load", "queue": "etl", "data": 4, "depends_on": ["t1", SCRIPT]},
    ])
    page = await dashboard.get(f"/flows/{flow.flow_id}")
    assert page.status_code == 200
    html = page.text
    assert SCRIPT not in html and str(escape(SCRIPT)) in html
    svg = html[html.index('<svg id="flow-graph"'):html.index("</svg>")]
    nodes = re.findall(r'class="flow-node (\w+)" data-key="([^"]*)"', svg)
    assert [status for status, _ in nodes] == ["pending", "waiting", "waiting", "waiting"]
    assert svg.count('class="flow-edge"') == 4
    for result in flow.jobs.values():
        assert f"/jobs/{result.job_id}" in svg
        job_page = await dashboard.get(f"/jobs/{result.job_id}")
        assert f'href="/flows/{flow.flow_id}"' in job_page.text
    await apq.cancel_job(job_id=flow.jobs["extract"].job_id)  # type: ignore[arg-type]
    html = (await dashboard.get(f"/flows/{flow.flow_id}")).text
    assert 'class="status failed">failed</span></h1>' in html
    assert html.count('class="flow-node cancelled"') == 4


async def test_an_unknown_or_malformed_flow_is_not_found(dashboard: httpx.AsyncClient) -> None:
    for flow_id in ("018f0000-0000-7000-8000-000000000000", "nope"):
        assert (await dashboard.get(f"/flows/{flow_id}")).status_code == 404
