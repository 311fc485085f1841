"""The queues page counts a queue's waiting jobs (issue 20), in the column
after the six statuses of before, and links to them."""

from __future__ import annotations

import httpx

from portqueue import AsyncPortQueue


async def test_the_queues_page_counts_waiting_jobs(
    dashboard: httpx.AsyncClient, apq: AsyncPortQueue,
) -> None:
    parent = (await apq.add_job(queue="flows", data=1)).job_id
    assert parent is not None
    await apq.add_jobs(queue="flows", jobs=[{"data": n, "depends_on": [parent]}
                                            for n in range(3)])
    html = (await dashboard.get("/")).text
    header = html[html.index("<thead"):html.index("</thead>")]
    assert ">waiting</th>" in header
    row = html[html.index('data-queue="flows"'):]
    row = row[: row.index("</tr>")]
    cells = [cell.split(">")[-1] for cell in row.split("</a></td>")[1:8]]
    assert cells == ["1", "0", "0", "0", "0", "0", "3"]  # pending … expired, waiting
    listing = (await dashboard.get("/jobs", params={"queue": "flows",
                                                      "status": "waiting"})).text
    assert listing.count('class="status waiting"') >= 3
