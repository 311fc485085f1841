"""Jobs whose stored JSON Python's decoder refuses by default (an integer past
the interpreter's int/str digit limit, which jsonb keeps and SQL can write)
stay readable: get_job returns them, the dashboard and the CLI show them."""

from __future__ import annotations

import sys
from decimal import Decimal
from typing import Any

import psycopg

from portqueue import PortQueue
from tests.support.rows import update_job

Db = psycopg.Connection[Any]


def test_an_integer_past_the_digit_limit_reads_as_an_exact_decimal(
        pq: PortQueue, db: Db, schema: str) -> None:
    digits = "9" * (sys.get_int_max_str_digits() + 700)
    job = pq.add_job(queue="q", data={})
    update_job(db, schema, job.job_id,
               f"data = '{{\"n\": {digits}, \"m\": -{digits}, \"small\": 7}}'::jsonb, "
               f"output = '[{digits}]'::jsonb")

    snapshot = pq.get_job(job_id=job.job_id)

    assert snapshot is not None
    assert snapshot.data == {"n": Decimal(digits), "m": Decimal("-" + digits), "small": 7}
    assert type(snapshot.data["small"]) is int
    assert snapshot.output == [Decimal(digits)]
    page = pq.get_jobs(queue="q")
    assert page.items[0].data["n"] == Decimal(digits)
