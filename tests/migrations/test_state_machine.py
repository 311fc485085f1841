"""The job state machine is written down in SQL and in Python; they must agree (STYLE 3)."""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg import sql

from portqueue.migrate import migrate, run_on_database
from portqueue.resources import resource_dir
from portqueue.types import FINISHED_STATUSES, JobStatus


def _migration(filename: str) -> Any:
    spec = importlib.util.spec_from_file_location(
        filename, resource_dir("migrations") / "versions" / filename)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


DROPPED = _migration("0006_job_checks.py").DROPPED


def test_job_status_enum_matches_python(db: psycopg.Connection[Any], migrated_schema: str) -> None:
    row = db.execute(
        """
        SELECT array_agg(e.enumlabel::text ORDER BY e.enumsortorder)
        FROM pg_enum e
        JOIN pg_type t ON t.oid = e.enumtypid
        JOIN pg_namespace n ON n.oid = t.typnamespace
        WHERE n.nspname = %s AND t.typname = 'job_status'
        """,
        [migrated_schema],
    ).fetchone()
    assert row is not None
    assert row[0] == [status.value for status in JobStatus]


def test_finished_statuses_match_the_finished_at_check(
    db: psycopg.Connection[Any], migrated_schema: str
) -> None:
    # finished_at is set exactly in the terminal states: the CHECK's list of
    # statuses must be JobStatus.finished, or a transition the code thinks is
    # legal is refused by the database (or the reverse).
    row = db.execute(
        """
        SELECT pg_get_constraintdef(con.oid)
        FROM pg_constraint con JOIN pg_namespace n ON n.oid = con.connamespace
        WHERE n.nspname = %s AND con.conname = 'job_finished_at_matches_status'
        """,
        [migrated_schema],
    ).fetchone()
    assert row is not None, "job_finished_at_matches_status is missing"
    in_sql = set(re.findall(r"'(\w+)'::", row[0]))
    assert in_sql == {status.value for status in FINISHED_STATUSES}
    assert in_sql == {status.value for status in JobStatus if status.finished}


STATE_MACHINE_CHECKS = {
    "job_attempt_within_max", "job_max_attempts_check", "job_backoff_strategy_check",
    "job_finished_at_matches_status", "job_active_has_lease",
}


def job_checks(conn: psycopg.Connection[Any], schema: str) -> set[str]:
    rows = conn.execute(
        "SELECT conname FROM pg_constraint WHERE contype = 'c' "
        "AND conrelid = format('%%I.job', %s::text)::regclass", [schema]).fetchall()
    return {name for (name,) in rows}


def test_the_job_table_checks_only_what_guards_the_state_machine(
    db: psycopg.Connection[Any], migrated_schema: str
) -> None:
    # PostgreSQL reads every CHECK of a table again for each statement writing
    # it (migration 0006): one more on the job table slows every add and claim.
    assert job_checks(db, migrated_schema) == STATE_MACHINE_CHECKS


@pytest.mark.parametrize("columns", [
    {"max_attempts": 0, "attempt": 0},  # no attempt allowed at all
    {"max_attempts": 1, "attempt": 2},  # attempts beyond max_attempts
    {"backoff_strategy": "cubic"},  # a retry no worker could schedule
    {"status": "active"},  # running without a lease: no rescuer would ever see it lapse
])
def test_a_hand_written_row_that_would_trip_the_worker_is_refused(
    db: psycopg.Connection[Any], schema: str, columns: dict[str, Any]
) -> None:
    """Each of these rows would make claims or retries of its queue fail; the
    database refuses it at the door instead."""
    values = {"id": "0190e3a6-0000-7000-8000-000000000001", "queue": "q", "data": "{}",
              **columns}
    with pytest.raises(psycopg.errors.CheckViolation):
        db.execute(sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
            sql.Identifier(schema, "job"),
            sql.SQL(", ").join(map(sql.Identifier, values)),
            sql.SQL(", ").join(sql.Placeholder() * len(values))), list(values.values()))


def test_migration_0006_drops_nine_checks_and_its_downgrade_restores_them(
    new_database: Callable[[str], str],
) -> None:
    dsn = new_database("checks")
    migrate(dsn, revision="0005")
    with psycopg.connect(dsn, autocommit=True) as conn:
        before = job_checks(conn, "portqueue")
        migrate(dsn)
        assert before - job_checks(conn, "portqueue") == set(DROPPED)
        assert job_checks(conn, "portqueue") == STATE_MACHINE_CHECKS
        conn.execute("INSERT INTO portqueue.job (id, queue, data) VALUES "
                     "(gen_random_uuid(), 'q', '{}')")
        downgrade(dsn, "0005")
        assert job_checks(conn, "portqueue") == before
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute("INSERT INTO portqueue.job (id, queue, data, progress) VALUES "
                         "(gen_random_uuid(), 'q', '{}', 2)")


def downgrade(dsn: str, revision: str) -> None:
    from alembic import command

    run_on_database(dsn, "portqueue", lambda config: command.downgrade(config, revision))
