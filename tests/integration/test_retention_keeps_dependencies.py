"""Retention never prunes a job whose dependents still wait (issue 20), by
whichever rule would prune it: its queue's ttl, its own ttl, its own
completed ttl, its queue's cap on completed jobs, or the client's default.
Once the dependents are released, the same rule prunes it."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from portqueue import PortQueue
from portqueue.maintenance.pruner import Pruner
from tests.support.rows import count_jobs, finish, job_row, set_queue, update_job
from tests.support.services import run_once

Db = psycopg.Connection[Any]

# (the parent's own retention, the parent queue's settings, the client's default retention)
RULES: dict[str, tuple[dict[str, int] | None, str | None, int]] = {
    "queue ttl": (None, "retention_ttl_seconds = 0", 3600),
    "own ttl": ({"ttl_seconds": 0}, None, 3600),
    "own completed ttl": ({"completed_ttl_seconds": 0}, None, 3600),
    "queue cap": (None, "retention_keep_completed = 0", 3600),
    "default ttl": (None, None, 0),
}


@pytest.mark.parametrize("rule", list(RULES))
def test_a_dependency_whose_dependents_wait_outlives_every_rule(
    client: PortQueue, db: Db, schema: str, pg_dsn: str, rule: str
) -> None:
    retention, queue_settings, default_seconds = RULES[rule]
    if queue_settings is not None:
        set_queue(db, schema, "kept-parent", queue_settings)
    parent = client.add_job(queue="kept-parent", data=1, retention=retention).job_id
    other = client.add_job(queue="kept-other", data=2).job_id
    assert parent is not None and other is not None
    child = client.add_job(queue="kept-child", data=3, depends_on=[parent, other]).job_id
    assert child is not None
    finish(db, schema, parent, "completed")
    update_job(db, schema, parent, "finished_at = now() - interval '1 minute'")
    assert job_row(db, schema, child)["status"] == "waiting"

    run_once(Pruner, pg_dsn, schema, default_retention_seconds=default_seconds)
    assert count_jobs(db, schema, f"id = '{parent}'") == 1, "pruned under a waiting dependent"

    finish(db, schema, other, "completed")
    assert job_row(db, schema, child)["status"] == "pending"
    run_once(Pruner, pg_dsn, schema, default_retention_seconds=default_seconds)
    assert count_jobs(db, schema, f"id = '{parent}'") == 0, "kept after its dependent left"
