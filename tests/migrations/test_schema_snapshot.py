"""sql/schema.sql is the DDL snapshot: it equals "every migration applied" (STYLE 11).

Two ways it can go stale, one test each: the schema the migrations build today
reads back as different DDL, or the file, run by hand the way a DBA would,
builds a different database than ``migrate()`` does.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from pathlib import Path

import psycopg

from portqueue.migrate import head_revision, migrate
from tests.migrations.catalog import EXPECTED_TABLES, schema_catalog, tables
from tools.dump_schema import schema_ddl

HEAD = head_revision()

SCHEMA_SQL = Path(__file__).resolve().parents[2] / "sql" / "schema.sql"
REGENERATE = "run `python tools/dump_schema.py` and commit sql/schema.sql"


def _diff(expected: str, actual: str) -> str:
    return "".join(difflib.unified_diff(
        expected.splitlines(keepends=True), actual.splitlines(keepends=True),
        fromfile="sql/schema.sql", tofile="all migrations applied"))


def test_schema_sql_is_the_schema_every_migration_builds(
    new_database: Callable[[str], str],
) -> None:
    dsn = new_database("snapshot_ddl")
    migrate(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        migrated = schema_ddl(conn)
    snapshot = SCHEMA_SQL.read_text(encoding="utf-8")
    assert snapshot == migrated, (
        f"sql/schema.sql is stale: {REGENERATE}\n{_diff(snapshot, migrated)}")


def test_schema_sql_builds_the_same_database_as_migrate(
    new_database: Callable[[str], str],
) -> None:
    from_file_dsn = new_database("snapshot_file")
    migrated_dsn = new_database("snapshot_migrate")

    with psycopg.connect(from_file_dsn, autocommit=True) as conn:
        # The file carries its own BEGIN/COMMIT; with no parameters psycopg
        # sends it as one simple-protocol query, as psql -f would.
        conn.execute(SCHEMA_SQL.read_text(encoding="utf-8"))
        from_file = schema_catalog(conn, "portqueue")
    migrate(migrated_dsn)
    with psycopg.connect(migrated_dsn, autocommit=True) as conn:
        migrated = schema_catalog(conn, "portqueue")

    # Guard against comparing two empty catalogs.
    assert tables(migrated) == EXPECTED_TABLES
    assert migrated["alembic_version"] == [(HEAD,)]
    for kind in ("columns", "constraints", "indexes", "triggers", "functions", "enums"):
        assert migrated[kind], f"no {kind} found after migrate(): the catalog query is broken"

    for kind in migrated:
        assert from_file[kind] == migrated[kind], (
            f"{kind} differ between sql/schema.sql and migrate(); {REGENERATE}")


def test_a_database_built_from_schema_sql_is_current_for_migrate(
    new_database: Callable[[str], str],
) -> None:
    # A DBA who installs from the file can still upgrade with migrate().
    dsn = new_database("snapshot_upgrade")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA_SQL.read_text(encoding="utf-8"))
    migrate(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert schema_catalog(conn, "portqueue")["alembic_version"] == [(HEAD,)]
