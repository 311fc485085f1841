"""A migrated schema's (empty) job table rebuilt as the partitioned layout of
docs/retention.md ("Partitioned history: the design"): ``job`` partitioned by
status into ``job_live`` and ``job_finished``, the latter by day of
``finished_at``. Only the tables and indexes: enough to plan the library's
statements against (EXPLAIN), not to run a worker on."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
from psycopg import sql

LIVE = ("pending", "active", "waiting")
FINISHED = ("completed", "failed", "cancelled", "expired")
DAYS = 3


def partition_job_table(db: psycopg.Connection[Any], schema: str) -> list[str]:
    """Rebuild ``schema``'s empty job table partitioned; returns the leaves' names."""
    job = sql.Identifier(schema, "job")
    indexes = [row[0] for row in db.execute(
        "SELECT pg_get_indexdef(indexrelid) FROM pg_index"
        " WHERE indrelid = %s::regclass AND NOT indisprimary",
        [f'"{schema}".job']).fetchall()]
    leaves = ["job_live"]
    with db.transaction():
        db.execute(sql.SQL("ALTER TABLE {} RENAME TO job_single").format(job))
        db.execute(sql.SQL(
            "CREATE TABLE {} (LIKE {} INCLUDING DEFAULTS INCLUDING CONSTRAINTS"
            " INCLUDING IDENTITY) PARTITION BY LIST (status)").format(
            job, sql.Identifier(schema, "job_single")))
        db.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(schema, "job_single")))
        db.execute(sql.SQL("CREATE TABLE {} PARTITION OF {} FOR VALUES IN ({})").format(
            sql.Identifier(schema, "job_live"), job,
            sql.SQL(", ").join(map(sql.Literal, LIVE))))
        db.execute(sql.SQL(
            "CREATE TABLE {} PARTITION OF {} FOR VALUES IN ({}) PARTITION BY RANGE (finished_at)"
        ).format(sql.Identifier(schema, "job_finished"), job,
                 sql.SQL(", ").join(map(sql.Literal, FINISHED))))
        today = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
        for day in range(-1, DAYS - 1):
            start = today + timedelta(days=day)
            name = f"job_finished_{start:%Y%m%d}"
            leaves.append(name)
            db.execute(sql.SQL(
                "CREATE TABLE {} PARTITION OF {} FOR VALUES FROM ({}) TO ({})").format(
                sql.Identifier(schema, name), sql.Identifier(schema, "job_finished"),
                sql.Literal(start), sql.Literal(start + timedelta(days=1))))
        for leaf in leaves:
            db.execute(sql.SQL("CREATE UNIQUE INDEX ON {} (id)").format(
                sql.Identifier(schema, leaf)))
        for definition in indexes:
            if definition.startswith("CREATE UNIQUE INDEX"):
                # Unique indexes without the partition keys: on the live leaf
                # (the key tables of the design take the others' place).
                definition = definition.replace(" ON ", " ON ", 1).replace(
                    f" ON {schema}.job ", f" ON {schema}.job_live ").replace(
                    f' ON "{schema}".job ', f' ON "{schema}".job_live ')
            db.execute(definition)
    return leaves
