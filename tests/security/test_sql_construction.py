"""No string-built SQL in portqueue's package or its migrations: the checker
(tests/security/sql_checker.py) finds none, and it does find every planted
example of the ways SQL gets built from strings."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.security.sql_checker import check_source, check_tree

ROOT = Path(__file__).resolve().parents[2]

PLANTED = {
    "f-string into execute": 'cur.execute(f"SELECT * FROM job WHERE queue = \'{queue}\'")',
    "% into execute": 'conn.execute("SELECT * FROM job WHERE id = %s" % job_id)',
    "+ into execute": 'conn.execute("DELETE FROM " + table)',
    ".format via a variable": (
        'def f(conn, x):\n    q = "SELECT {} FROM job".format(x)\n    conn.execute(q)'),
    ".join into executemany": 'cur.executemany(", ".join(columns), rows)',
    "f-string into sql.SQL": 'from psycopg import sql\nsql.SQL(f"SELECT {column} FROM job")',
    "+ into sql.SQL": 'from psycopg import sql as s\ns.SQL("SELECT " + column)',
    "% into SQLAlchemy text": 'from sqlalchemy import text\ntext("SELECT %s" % value)',
    "SQL built far from its sink": 'def q(schema):\n    return "DROP SCHEMA {}".format(schema)',
    "SQL constant formatted": 'UPGRADE = "ALTER TABLE {t} ADD x int"\nUPGRADE.format(t=name)',
    "sql.SQL from a variable": 'from psycopg import sql\nsql.SQL(user_supplied)',
    "schema f-string unquoted": 'op.execute(f"CREATE SCHEMA {schema}")',
}

ALLOWED = {
    "a named query": "cur.execute(query.sql, query.params)",
    "a literal": 'conn.execute("SELECT 1")',
    "psycopg composition": (
        "from psycopg import sql\n"
        'conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))'),
    "the quoted schema": 'context.execute(f"CREATE SCHEMA IF NOT EXISTS {quoted_schema}")',
    "a log line": 'log.info(f"added {count} jobs to {queue}")',
    "text() that is not SQLAlchemy's": 'text("queue", value, max_length=128)',
}


def test_the_package_and_migrations_build_no_sql_from_strings() -> None:
    findings = check_tree(ROOT, ("portqueue", "migrations"))
    assert findings == [], "string-built SQL:\n" + "\n".join(map(str, findings))


@pytest.mark.parametrize("source", PLANTED.values(), ids=PLANTED.keys())
def test_the_checker_finds_a_planted_example(source: str) -> None:
    assert check_source(source), f"not caught:\n{source}"


@pytest.mark.parametrize("source", ALLOWED.values(), ids=ALLOWED.keys())
def test_the_checker_passes_what_the_style_allows(source: str) -> None:
    assert check_source(source) == []


def test_the_checker_reads_the_real_sinks() -> None:
    # It must be looking at the places SQL runs, not at an empty tree: the
    # drivers' execute calls and the named-query loader are there to see.
    sources = {path: (ROOT / path).read_text() for path in (
        "portqueue/driver/__init__.py", "portqueue/queries.py")}
    assert "cursor.execute(*_bound(cursor, query))" in sources["portqueue/driver/__init__.py"]
    planted = sources["portqueue/driver/__init__.py"].replace(
        "cursor.execute(*_bound(cursor, query))",
        'cursor.execute(f"SELECT * FROM {query.name}", query.params)')
    assert check_source(planted, "portqueue/driver/__init__.py")
