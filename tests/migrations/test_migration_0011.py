"""Migration 0011 (settling in a loop): on a schema with a waiting chain in
it, the upgrade keeps every row and the chain then cancels in one statement
however deep; the downgrade brings back 0010's trigger function (a chain
cancels by nesting again, a deep one hitting max_stack_depth) and leaves the
rows as they were."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from alembic import command

from portqueue import PortQueue
from portqueue.migrate import migrate, run_on_database

# Nested triggers for 0010 overflow max_stack_depth well before this.
DEPTH = 1_000


def chain(pq: PortQueue, queue: str) -> list[str]:
    flow = pq.add_flow(jobs=[
        {"key": "s0", "queue": queue, "data": 0},
        *({"key": f"s{n}", "queue": queue, "data": n, "depends_on": [f"s{n - 1}"]}
          for n in range(1, DEPTH))])
    return [str(flow.jobs[f"s{n}"].job_id) for n in range(DEPTH)]


def counts(conn: psycopg.Connection[Any], queue: str) -> dict[str, int]:
    rows = conn.execute("SELECT status::text, count(*) FROM portqueue.job WHERE queue = %s "
                        "GROUP BY 1", [queue]).fetchall()
    return dict(rows)


def functions(conn: psycopg.Connection[Any]) -> set[str]:
    rows = conn.execute("SELECT proname FROM pg_proc "
                        "WHERE pronamespace = 'portqueue'::regnamespace")
    return {name for (name,) in rows.fetchall()}


def test_upgrade_settles_a_deep_chain_and_downgrade_brings_back_nesting(
    new_database: Callable[[str], str],
) -> None:
    dsn = new_database("settle_loop")
    migrate(dsn, revision="0010")
    with psycopg.connect(dsn, autocommit=True) as conn, PortQueue(dsn) as pq:
        before = chain(pq, "before")
        migrate(dsn, revision="0011")
        assert "settle_dependents_of" in functions(conn)
        assert counts(conn, "before") == {"pending": 1, "waiting": DEPTH - 1}
        assert pq.cancel_job(job_id=before[0]).outcome.value == "cancelled"
        assert counts(conn, "before") == {"cancelled": DEPTH}

        after = chain(pq, "after")
        run_on_database(dsn, "portqueue", lambda config: command.downgrade(config, "0010"))
        assert "settle_dependents_of" not in functions(conn)
        assert counts(conn, "after") == {"pending": 1, "waiting": DEPTH - 1}
        with pytest.raises(psycopg.errors.StatementTooComplex):
            pq.cancel_job(job_id=after[0])
        assert counts(conn, "after") == {"pending": 1, "waiting": DEPTH - 1}
        migrate(dsn)
        assert pq.cancel_job(job_id=after[0]).outcome.value == "cancelled"
        assert counts(conn, "after") == {"cancelled": DEPTH}
