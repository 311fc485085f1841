"""The job state machine is written down in SQL and in Python; they must agree (STYLE 3)."""

from __future__ import annotations

import re
from typing import Any

import psycopg

from portqueue.types import FINISHED_STATUSES, JobStatus


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
