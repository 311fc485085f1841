"""Migration 0014 (maintenance leader): one worker leads each role for a term,
another takes it only when the term ends or the leader resigns; the
downgrade removes the table."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import psycopg
from alembic import command

from portqueue import maintenance_operations as ops
from portqueue.driver import execute_sync as execute
from portqueue.migrate import migrate, run_on_database
from portqueue.queries import queries_for


def test_one_leader_per_term_and_downgrade_removes_it(
    new_database: Callable[[str], str],
) -> None:
    dsn = new_database("maintenance_leader")
    migrate(dsn, revision="0013")
    migrate(dsn, revision="0014")
    q = queries_for("portqueue")
    first, second = str(uuid.uuid4()), str(uuid.uuid4())
    with psycopg.connect(dsn, autocommit=True) as conn:
        def lead(worker: str, seconds: float, role: str = "maintenance") -> tuple[bool, float]:
            return ops.leadership(execute(conn, ops.lead(
                q, role=role, worker_id=worker, seconds=seconds)))

        leads, left = lead(first, 60)
        assert leads and 55 < left <= 60
        leads, left = lead(second, 60)
        assert not leads and 55 < left <= 60, "the first's term runs"
        assert lead(second, 60, role="scheduler")[0], "each role has its own leader"
        assert lead(first, 60)[0], "the leader renews"
        execute(conn, ops.resign(q, worker_id=first))
        assert lead(second, 60)[0], "a resigned role is taken at once"
        conn.execute("UPDATE portqueue.maintenance_leader SET until = now() - interval '1 s'")
        assert lead(first, 60)[0], "an ended term is taken"

        run_on_database(dsn, "portqueue", lambda config: command.downgrade(config, "0013"))
        assert conn.execute("SELECT to_regclass('portqueue.maintenance_leader')"
                            ).fetchone() == (None,)
