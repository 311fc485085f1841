"""A job whose data was written by SQL too deep for Python to decode (issue 16,
item 8's family): its page and the list holding it answer a 400 naming the
column, never a 500 nor "no such job", and the other pages still work."""

from __future__ import annotations

from typing import Any

import httpx
import psycopg
from psycopg import sql

from portqueue import AsyncPortQueue

DEEP = "[" * 5_000 + "]" * 5_000


async def test_a_job_too_deep_to_decode_is_a_400_naming_the_column(
    dashboard: httpx.AsyncClient, apq: AsyncPortQueue, db: psycopg.Connection[Any], schema: str,
) -> None:
    row = db.execute(sql.SQL(
        "INSERT INTO {} (id, queue, data) VALUES (gen_random_uuid(), 'deep', %s::jsonb) "
        "RETURNING id::text").format(sql.Identifier(schema, "job")), [DEEP]).fetchone()
    assert row is not None
    page = await dashboard.get(f"/jobs/{row[0]}")
    assert page.status_code == 400, page.text
    assert "data: is nested 5000 arrays/objects deep" in page.text
    assert (await dashboard.get("/")).status_code == 200
    # The list holding it says the same (its rows are decoded to be shown).
    listed = await dashboard.get("/jobs", params={"queue": "deep"})
    assert listed.status_code == 400, listed.text
    assert "too deep for Python to decode" in listed.text
