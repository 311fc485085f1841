"""What a schema holds, read from the system catalogs, for comparing two schemas."""

from __future__ import annotations

import re
from datetime import date, datetime
from typing import Any

import psycopg
from psycopg import sql

_QUERIES = {
    # Every relation (tables, indexes, sequences, views) and its kind.
    "relations": """
        SELECT c.relname, c.relkind::text
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = %(schema)s
        ORDER BY 1""",
    # Columns in table order: name, type, nullability, default, identity.
    "columns": """
        SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
               pg_get_expr(d.adbin, d.adrelid), a.attidentity::text, a.attgenerated::text
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE n.nspname = %(schema)s AND c.relkind IN ('r', 'p')
          AND a.attnum > 0 AND NOT a.attisdropped
        ORDER BY c.relname, a.attnum""",
    "constraints": """
        SELECT cl.relname, con.conname, con.contype::text, pg_get_constraintdef(con.oid)
        FROM pg_constraint con
        JOIN pg_class cl ON cl.oid = con.conrelid
        JOIN pg_namespace n ON n.oid = con.connamespace
        WHERE n.nspname = %(schema)s
        ORDER BY 1, 2""",
    # pg_indexes.indexdef is pg_get_indexdef: schema-qualified.
    "indexes": """
        SELECT tablename, indexname, indexdef
        FROM pg_indexes WHERE schemaname = %(schema)s
        ORDER BY 1, 2""",
    "triggers": """
        SELECT c.relname, t.tgname, pg_get_triggerdef(t.oid)
        FROM pg_trigger t
        JOIN pg_class c ON c.oid = t.tgrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = %(schema)s AND NOT t.tgisinternal
        ORDER BY 1, 2""",
    "functions": """
        SELECT p.proname, pg_get_function_identity_arguments(p.oid),
               pg_get_function_result(p.oid), l.lanname, p.prosrc
        FROM pg_proc p
        JOIN pg_namespace n ON n.oid = p.pronamespace
        JOIN pg_language l ON l.oid = p.prolang
        WHERE n.nspname = %(schema)s
        ORDER BY 1, 2""",
    # Partitioned tables' keys, partitions' parents and bounds (days as
    # _neutral writes them: in UTC, set by schema_catalog).
    "partitions": """
        SELECT c.relname, p.relname, pg_get_expr(c.relpartbound, c.oid), pg_get_partkeydef(c.oid)
        FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        LEFT JOIN pg_inherits i ON i.inhrelid = c.oid AND c.relispartition
        LEFT JOIN pg_class p ON p.oid = i.inhparent
        WHERE n.nspname = %(schema)s AND (c.relispartition OR c.relkind = 'p')
          AND c.relkind IN ('r', 'p')
        ORDER BY 1""",
    # Which partitioned index each partition's index is attached to.
    "attached_indexes": """
        SELECT p.relname, c.relname
        FROM pg_inherits i
        JOIN pg_class c ON c.oid = i.inhrelid
        JOIN pg_class p ON p.oid = i.inhparent
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = %(schema)s AND c.relkind IN ('i', 'I')
        ORDER BY 2""",
    "enums": """
        SELECT t.typname, array_agg(e.enumlabel::text ORDER BY e.enumsortorder)
        FROM pg_enum e
        JOIN pg_type t ON t.oid = e.enumtypid
        JOIN pg_namespace n ON n.oid = t.typnamespace
        WHERE n.nspname = %(schema)s
        GROUP BY t.typname
        ORDER BY 1""",
}


def schema_catalog(conn: psycopg.Connection[Any], schema: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every part of ``schema`` a migration creates, as sorted rows per kind.

    Text that names the schema (index and trigger definitions, casts to the
    enum) has it replaced by ``<schema>``, so two schemas can be compared; a
    day partition's day (``job_finished_20261203``) and a bound at a UTC
    midnight, by the day counted from today (``job_finished_<day+1>``), so
    two schemas made the same day compare equal whichever day that was.
    """
    row = conn.execute("SELECT (now() AT TIME ZONE 'UTC')::date, current_setting('TimeZone')"
                       ).fetchone()
    assert row is not None
    today, zone = row
    conn.execute("SELECT set_config('TimeZone', 'UTC', false)")
    try:
        catalog: dict[str, list[tuple[Any, ...]]] = {}
        for kind, query in _QUERIES.items():
            rows = conn.execute(query, {"schema": schema}).fetchall()
            catalog[kind] = [tuple(_neutral(value, schema, today) for value in row)
                             for row in rows]
    finally:
        conn.execute("SELECT set_config('TimeZone', %s, false)", [zone])
    catalog["alembic_version"] = alembic_versions(conn, schema)
    return catalog


def alembic_versions(conn: psycopg.Connection[Any], schema: str) -> list[tuple[Any, ...]]:
    query = sql.SQL("SELECT version_num FROM {} ORDER BY 1").format(
        sql.Identifier(schema, "alembic_version"))
    return [tuple(row) for row in conn.execute(query).fetchall()]


_DAY_NAME = re.compile(r"(?<![\w'])([a-z][a-z0-9_]*_)(\d{8})(?!\d)")
_DAY_BOUND = re.compile(r"'(\d{4}-\d{2}-\d{2}) 00:00:00\+00'")


def _neutral(value: Any, schema: str, today: date) -> Any:
    if isinstance(value, str):
        # Not inside a string literal: 'portqueue.settling' is a setting's
        # name, the same whatever the schema.
        unquoted = value.replace(f'"{schema}".', "<schema>.")
        value = re.sub(rf"(?<!')\b{re.escape(schema)}\.", "<schema>.", unquoted)
        value = _DAY_NAME.sub(lambda m: _from_today(m, 2, "%Y%m%d", today), value)
        return _DAY_BOUND.sub(lambda m: _from_today(m, 1, "%Y-%m-%d", today), value)
    if isinstance(value, list):
        return tuple(_neutral(item, schema, today) for item in value)
    return value


def _from_today(match: re.Match[str], group: int, fmt: str, today: date) -> str:
    """The match with its date (``group``) as ``<day+N>``, N days from ``today``;
    as it is if those digits are no date."""
    try:
        day = datetime.strptime(match.group(group), fmt).date()
    except ValueError:
        return match.group(0)
    start, end = match.start(group) - match.start(), match.end(group) - match.start()
    whole = match.group(0)
    return f"{whole[:start]}<day{(day - today).days:+d}>{whole[end:]}"


EXPECTED_TABLES = {
    "alembic_version", "queue", "job", "schedule", "worker",
    "queue_start", "throttle_window",  # migration 0009 (flow control)
    "subscription",  # migration 0010 (workflows)
    "maintenance_leader",  # migration 0014
}


def tables(catalog: dict[str, list[tuple[Any, ...]]]) -> set[str]:
    return {name for name, kind in catalog["relations"] if kind == "r"}


def column_names(conn: psycopg.Connection[Any], table: str = "job") -> set[str]:
    """The columns of ``portqueue.<table>`` now, dropped ones left out."""
    rows = conn.execute("SELECT attname FROM pg_attribute WHERE attnum > 0 "
                        "AND NOT attisdropped AND attrelid = %s::regclass", [f"portqueue.{table}"])
    return {name for (name,) in rows.fetchall()}


def job_indexes(conn: psycopg.Connection[Any]) -> set[str]:
    """The names of the indexes on ``portqueue.job`` now."""
    rows = conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = 'portqueue' "
                        "AND tablename = 'job'")
    return {name for (name,) in rows.fetchall()}
