"""Hostile text in the dashboard's query strings and add form: a 400 that names
the parameter (the form shown again with what was typed), never a 500, and
nothing written. Page numbers are ASCII digits only."""

from __future__ import annotations

from html import escape

import httpx
import pytest

from portqueue import AsyncPortQueue
from tests.dashboard.conftest import csrf_token, job_ids_listed
from tests.support.job_ids import odd_spellings

NESTED = "[" * 10_000 + "]" * 10_000
HUGE_INTEGER = "1" * 5_000

# Each is a digit to str.isdigit() (or to int()), and none is an ASCII digit.
NOT_ASCII_DIGITS = ["²", "¹", "٣", "\uff13", "1_0", " ", "-1", "+"]  # \uff13: fullwidth 3


@pytest.mark.parametrize("path", ["/", "/jobs?queue=q", "/schedules"])
@pytest.mark.parametrize("page", [*NOT_ASCII_DIGITS, HUGE_INTEGER, "0" * 5_000 + "2"],
                         ids=[*NOT_ASCII_DIGITS, "huge", "zeros"])
async def test_page_numbers_are_ascii_digits_in_range(
    dashboard: httpx.AsyncClient, path: str, page: str
) -> None:
    separator = "&" if "?" in path else "?"
    response = await dashboard.get(f"{path}{separator}page={page}")
    if page.startswith("0000"):  # leading zeros are still page 2
        assert response.status_code == 200, response.text
        return
    assert response.status_code == 400, (page, response.text)
    assert "page: expected an integer from 1 to 1000000" in response.text


async def test_an_eastern_arabic_three_is_not_page_three(
    dashboard: httpx.AsyncClient, apq: AsyncPortQueue
) -> None:
    await apq.add_jobs(queue="bulk", jobs=[{"data": {"n": n}} for n in range(120)])
    third = await dashboard.get("/jobs", params={"queue": "bulk", "page": "3"})
    assert len(job_ids_listed(third.text)) == 20
    assert (await dashboard.get("/jobs", params={"queue": "bulk", "page": "٣"})
            ).status_code == 400


@pytest.mark.parametrize(
    ("fields", "message"),
    [({"data": NESTED}, "data: is nested deeper than 200 arrays/objects"),
     ({"data": HUGE_INTEGER}, "data: has an integer of more than 4300 digits"),
     ({"data": f"[{HUGE_INTEGER}]"}, "data: has an integer of more than 4300 digits"),
     ({"data": "1e400"}, "data: has a number too large for a float"),
     ({"data": "[-Infinity]"}, "data: -Infinity is not JSON"),
     ({"data": "{}", "priority": HUGE_INTEGER}, "priority: expected an integer from"),
     ({"data": "{}", "priority": "٣"}, "priority: expected an integer from"),
     ({"data": "{}", "priority": "²"}, "priority: expected an integer from"),
     ({"data": "{}", "priority": "2147483648"}, "priority: expected an integer from")],
    ids=["nested", "huge-int", "huge-int-in-array", "huge-float", "infinity", "huge-priority",
         "arabic-priority", "superscript-priority", "priority-out-of-range"])
async def test_hostile_add_forms_are_shown_again_and_write_nothing(
    dashboard: httpx.AsyncClient, apq: AsyncPortQueue, fields: dict[str, str], message: str
) -> None:
    token = csrf_token((await dashboard.get("/jobs/new")).text)
    form = {"csrf_token": token, "queue": "hostile", "priority": "", **fields}
    refused = await dashboard.post("/jobs/new", data=form)
    assert refused.status_code == 400, refused.text[:500]
    assert 'id="form-error"' in refused.text and escape(message) in refused.text
    assert escape(fields["data"][:50]) in refused.text, "what was typed is kept"
    assert (await apq.get_queues()).total == 0, "nothing written, not even the queue"


async def test_a_content_length_of_superscript_digits_is_a_400(
    dashboard: httpx.AsyncClient, apq: AsyncPortQueue
) -> None:
    # "²".isdigit() is true; a header is Latin-1, where "²" is one byte.
    token = csrf_token((await dashboard.get("/jobs/new")).text)
    body = f"csrf_token={token}&queue=hostile&data=%7B%7D".encode()
    request = dashboard.build_request(
        "POST", "/jobs/new", content=body,
        headers={"content-type": "application/x-www-form-urlencoded"})
    request.headers["content-length"] = "²".encode("latin-1").decode("latin-1")
    response = await dashboard.send(request)
    assert response.status_code == 400, response.text[:300]
    assert "content-length:" in response.text
    assert (await apq.get_queues()).total == 0


async def test_a_job_id_is_ascii_hex_only(
    dashboard: httpx.AsyncClient, apq: AsyncPortQueue
) -> None:
    added = await apq.add_job(queue="hostile", data={"keep": True})
    assert added.job_id is not None
    assert (await dashboard.get(f"/jobs/{added.job_id}")).status_code == 200
    token = csrf_token((await dashboard.get("/jobs/new")).text)
    for spelling in odd_spellings(added.job_id):
        assert (await dashboard.get(f"/jobs/{spelling}")).status_code == 404, spelling
        removed = await dashboard.post(f"/jobs/{spelling}/remove", data={"csrf_token": token})
        assert removed.status_code == 400, spelling
    assert await apq.get_job(job_id=added.job_id) is not None, "another spelling removed it"
