"""Migration 0017 (the claim index split by partition key): pending jobs with
neither a pattern nor a key are in job_claim_idx, those with a key and no
pattern in job_claim_keyed_idx, those with a pattern in job_claim_patterned_idx,
each in exactly one; rows are kept, and the downgrade restores 0016's indexes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
from alembic import command
from psycopg import sql

from portqueue.migrate import migrate, run_on_database

ROWS = """
INSERT INTO portqueue.job (id, queue, data, preferred_instance_key_pattern, partition_key)
VALUES (gen_random_uuid(), 'q', '{}', NULL, NULL), (gen_random_uuid(), 'q', '{}', NULL, 'k'),
       (gen_random_uuid(), 'q', '{}', '^gpu-', 'k')
"""

# Each claim index's own condition; a row it holds that another holds too
# would be an add writing more entries than before.
CONDITIONS = {
    "job_claim_idx": "preferred_instance_key_pattern IS NULL AND partition_key IS NULL",
    "job_claim_keyed_idx": "preferred_instance_key_pattern IS NULL AND partition_key IS NOT NULL",
    "job_claim_patterned_idx": "preferred_instance_key_pattern = '^gpu-'",
}


def index_definitions(conn: psycopg.Connection[Any]) -> dict[str, str]:
    return dict(conn.execute(
        "SELECT indexname, indexdef FROM pg_indexes "
        "WHERE schemaname = 'portqueue' AND indexname LIKE 'job\\_claim%'").fetchall())


def index_entries(conn: psycopg.Connection[Any], index: str) -> int:
    """The entries of one index, counted by reading that index only."""
    conn.execute("SET enable_seqscan = off")
    conn.execute("SET enable_bitmapscan = off")
    count = sql.SQL("SELECT count(*) FROM portqueue.job "
                    "WHERE queue = 'q' AND status = 'pending' AND {}").format(
                        sql.SQL(CONDITIONS[index]))  # type: ignore[arg-type]
    plan = conn.execute(sql.SQL("EXPLAIN (FORMAT JSON) {}").format(count)).fetchone()
    assert plan is not None and index in str(plan[0]), plan
    row = conn.execute(count).fetchone()
    assert row is not None
    return int(row[0])


def test_upgrade_splits_the_claim_index_by_key_and_downgrade_joins_it(
    new_database: Callable[[str], str],
) -> None:
    dsn = new_database("claim_by_key")
    migrate(dsn, revision="0016")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(ROWS)
        migrate(dsn, revision="0017")
        indexes = index_definitions(conn)
        assert set(indexes) == {"job_claim_idx", "job_claim_keyed_idx",
                                "job_claim_patterned_idx"}
        assert "partition_key IS NULL" in indexes["job_claim_idx"]
        assert "preferred_instance_key_pattern IS NULL" in indexes["job_claim_idx"]
        assert "partition_key IS NOT NULL" in indexes["job_claim_keyed_idx"]
        assert "preferred_instance_key_pattern IS NULL" in indexes["job_claim_keyed_idx"]
        assert conn.execute("SELECT count(*) FROM portqueue.job").fetchone() == (3,)
        # Each pending job is in one claim index: three rows, one through each
        # (the three conditions are disjoint, and together cover every pending job).
        assert {name: index_entries(conn, name) for name in CONDITIONS} == {
            "job_claim_idx": 1, "job_claim_keyed_idx": 1, "job_claim_patterned_idx": 1}

        run_on_database(dsn, "portqueue", lambda config: command.downgrade(config, "0016"))
        indexes = index_definitions(conn)
        assert set(indexes) == {"job_claim_idx", "job_claim_patterned_idx"}
        assert "partition_key" not in indexes["job_claim_idx"]
        assert conn.execute("SELECT count(*) FROM portqueue.job").fetchone() == (3,)
        conn.execute("SET enable_seqscan = off")
        assert conn.execute(
            "SELECT count(*) FROM portqueue.job WHERE queue = 'q' AND status = 'pending' "
            "AND preferred_instance_key_pattern IS NULL").fetchone() == (2,)
