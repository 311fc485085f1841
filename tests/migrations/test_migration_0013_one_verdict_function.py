"""Migration 0013 (one verdict function): on a schema with fan-ins waiting in
it, the upgrade keeps every row, both settling functions call
dependency_verdicts instead of carrying the verdict CTE, and fan-ins settle
as before (released when every dependency completed, cancelled naming the
one that failed); the downgrade brings back 0011's two copies, drops the
function, and the rules are the same."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
from alembic import command

from portqueue import PortQueue
from portqueue.migrate import migrate, run_on_database
from tests.support.rows import finish, job_row


def fan_in(pq: PortQueue, queue: str) -> dict[str, str]:
    flow = pq.add_flow(jobs=[
        {"key": "a", "queue": queue, "data": 1},
        {"key": "b", "queue": queue, "data": 2},
        {"key": "sink", "queue": queue, "data": 3, "depends_on": ["a", "b"]}])
    return {key: str(job.job_id) for key, job in flow.jobs.items()}


def bodies(conn: psycopg.Connection[Any]) -> dict[str, str]:
    rows = conn.execute("SELECT proname, prosrc FROM pg_proc "
                        "WHERE pronamespace = 'portqueue'::regnamespace")
    return dict(rows.fetchall())


def settles_as_before(conn: psycopg.Connection[Any], pq: PortQueue, queue: str) -> None:
    done, broken = fan_in(pq, queue + "-done"), fan_in(pq, queue + "-broken")
    finish(conn, "portqueue", done["a"], "completed")
    assert job_row(conn, "portqueue", done["sink"])["status"] == "waiting"
    finish(conn, "portqueue", done["b"], "completed")
    assert job_row(conn, "portqueue", done["sink"])["status"] == "pending"
    finish(conn, "portqueue", broken["a"], "completed")
    finish(conn, "portqueue", broken["b"], "failed")
    sink = job_row(conn, "portqueue", broken["sink"])
    assert sink["status"] == "cancelled"
    assert sink["errors"][-1]["type"] == "DependencyFailed"
    assert sink["errors"][-1]["dependency_id"] == broken["b"]
    assert sink["error"] == f"dependency {broken['b']} ended failed"


def test_upgrade_folds_the_verdict_and_downgrade_restores_both_copies(
    new_database: Callable[[str], str],
) -> None:
    dsn = new_database("verdicts")
    migrate(dsn, revision="0012")
    with psycopg.connect(dsn, autocommit=True) as conn, PortQueue(dsn) as pq:
        before = fan_in(pq, "before")
        migrate(dsn, revision="0013")
        found = bodies(conn)
        assert "dependency_verdicts" in found
        for name in ("settle_dependents", "settle_dependents_of"):
            assert "dependency_verdicts(" in found[name]
            assert "WITH deps AS" not in found[name]
        assert job_row(conn, "portqueue", before["sink"])["status"] == "waiting"
        settles_as_before(conn, pq, "upgraded")

        run_on_database(dsn, "portqueue", lambda config: command.downgrade(config, "0012"))
        found = bodies(conn)
        assert "dependency_verdicts" not in found
        for name in ("settle_dependents", "settle_dependents_of"):
            assert "WITH deps AS" in found[name]
        settles_as_before(conn, pq, "downgraded")
        migrate(dsn)
        assert "dependency_verdicts" in bodies(conn)
