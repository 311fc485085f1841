"""`portqueue retry` and `cancel` by filter act through ``retry_jobs`` and
``cancel_jobs`` (issue 21), a statement per page: running jobs are signalled
and reported so, and of settled jobs sharing a singleton key only one is
re-armed. Checked against the rows."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from portqueue import PortQueue
from tests.support.cli import Cli
from tests.support.rows import count_jobs, finish, job_row, make_active

Db = psycopg.Connection[Any]


@pytest.fixture
def cli(pg_dsn: str, schema: str) -> Cli:
    return Cli(pg_dsn, schema)


def test_cancel_by_filter_signals_running_jobs(
    cli: Cli, pq: PortQueue, db: Db, schema: str
) -> None:
    for n in range(4):
        pq.add_job(queue="reindex", data=n)
    running = str(pq.add_job(queue="reindex", data="running").job_id)
    make_active(db, schema, running)
    out = cli.json("cancel", "--queue", "reindex", "--status", "pending,active")
    assert out == {"matched": 5, "outcomes": {
        "cancelled": 4, "signalled": 1, "not_found": 0, "already_finished": 0}}
    assert count_jobs(db, schema, "status = 'cancelled'") == 4
    assert job_row(db, schema, running)["cancel_requested_at"] is not None


def test_retry_by_filter_rearms_one_job_per_singleton_key(
    cli: Cli, pq: PortQueue, db: Db, schema: str
) -> None:
    for n in range(2):
        job_id = str(pq.add_job(queue="sync", data=n, singleton_key="account-1").job_id)
        finish(db, schema, job_id, "failed")
    plain = str(pq.add_job(queue="sync", data="plain").job_id)
    finish(db, schema, plain, "failed")
    out = cli.json("retry", "--queue", "sync", "--status", "failed")
    assert out == {"matched": 3, "retried": 2}
    assert count_jobs(db, schema, "status = 'pending'") == 2
    assert job_row(db, schema, plain)["status"] == "pending"
