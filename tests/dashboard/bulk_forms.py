"""What the bulk-action tests read: the statuses of the jobs acted on, and the
hidden fields of the confirmation form a bulk GET renders."""

from __future__ import annotations

import re
from typing import Any

import psycopg

from tests.support.rows import job_row

Db = psycopg.Connection[Any]


def statuses(db: Db, schema: str, ids: list[str]) -> list[str]:
    return [job_row(db, schema, job_id)["status"] for job_id in ids]


def confirm_form(page: str) -> dict[str, str]:
    form = re.search(r'<form method="post" action="/bulk".*?</form>', page, re.S)
    assert form is not None, "no confirmation form"
    return dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', form.group(0)))
