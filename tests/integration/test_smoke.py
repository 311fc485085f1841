"""The shortest path through producing and reading (the async client's is in
tests/integration/test_client_parity.py)."""

from __future__ import annotations

from typing import Any

import psycopg

from portqueue import JobStatus
from tests.support.rows import count_jobs


def test_added_job_is_readable(client: Any, db: psycopg.Connection[Any], schema: str) -> None:
    added = client.add_job(queue="emails", data={"to": "a@b.com"})
    assert added.status is JobStatus.PENDING and not added.deduplicated
    snapshot = client.get_job(job_id=added.job_id)
    assert snapshot.data == {"to": "a@b.com"}
    assert snapshot.status is JobStatus.PENDING
    assert count_jobs(db, schema) == 1
