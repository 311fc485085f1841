"""Migration 0015 (the claim index split by pattern): pending jobs without a
pattern are in job_claim_idx, those with one in job_claim_patterned_idx, each
in exactly one; rows are kept, and the downgrade restores the single index."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
from alembic import command

from portqueue.migrate import migrate, run_on_database

ROWS = """
INSERT INTO portqueue.job (id, queue, data, preferred_instance_key_pattern) VALUES
    (gen_random_uuid(), 'q', '{}', NULL), (gen_random_uuid(), 'q', '{}', '^gpu-')
"""


def index_definitions(conn: psycopg.Connection[Any]) -> dict[str, str]:
    return dict(conn.execute(
        "SELECT indexname, indexdef FROM pg_indexes "
        "WHERE schemaname = 'portqueue' AND indexname LIKE 'job\\_claim%'").fetchall())


def test_upgrade_splits_the_claim_index_and_downgrade_joins_it(
    new_database: Callable[[str], str],
) -> None:
    dsn = new_database("claim_by_pattern")
    migrate(dsn, revision="0014")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(ROWS)
        migrate(dsn, revision="0015")
        indexes = index_definitions(conn)
        assert set(indexes) == {"job_claim_idx", "job_claim_patterned_idx"}
        assert "preferred_instance_key_pattern IS NULL" in indexes["job_claim_idx"]
        assert "preferred_instance_key_pattern IS NOT NULL" in indexes["job_claim_patterned_idx"]
        assert conn.execute("SELECT count(*) FROM portqueue.job").fetchone() == (2,)
        # Each pending job is in one claim index: one ready row through each.
        conn.execute("SET enable_seqscan = off")
        assert conn.execute(
            "SELECT count(*) FROM portqueue.job WHERE queue = 'q' AND status = 'pending' "
            "AND preferred_instance_key_pattern IS NULL").fetchone() == (1,)
        assert conn.execute(
            "SELECT count(*) FROM portqueue.job WHERE queue = 'q' AND status = 'pending' "
            "AND preferred_instance_key_pattern = '^gpu-'").fetchone() == (1,)

        run_on_database(dsn, "portqueue", lambda config: command.downgrade(config, "0014"))
        indexes = index_definitions(conn)
        assert set(indexes) == {"job_claim_idx"}
        assert "preferred_instance_key_pattern" not in indexes["job_claim_idx"]
        assert conn.execute("SELECT count(*) FROM portqueue.job").fetchone() == (2,)
