"""``portqueue migrate``: the console script, run as a user runs it (a subprocess)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from portqueue.migrate import head_revision, migrate, migration_sql
from tests.migrations.catalog import EXPECTED_TABLES, schema_catalog, tables
from tests.migrations.conftest import CLOSED_PORT_DSN, cli_env, run_cli
from tests.migrations.stepped import REVISION, migrate_stepped, stepped_scripts, stepped_sql

HEAD = head_revision()

PASSWORD = "s3cretpw"


def test_sql_prints_the_snapshot_without_a_database(tmp_path: Path) -> None:
    # PORTQUEUE_DSN points at a closed port: any connection attempt would fail.
    result = run_cli("migrate", "--sql", env=cli_env(PORTQUEUE_DSN=CLOSED_PORT_DSN), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "CREATE TABLE" in result.stdout
    assert result.stdout == migration_sql()
    assert result.stderr == ""


@pytest.mark.skipif(shutil.which("psql") is None, reason="psql is not installed")
@pytest.mark.parametrize("steps", ["portqueue", "outside a transaction"])
def test_sql_runs_in_psql_and_builds_what_migrate_builds(
    new_database: Callable[[str], str], tmp_path: Path, steps: str
) -> None:
    # What a DBA runs: the printed script, as is, with psql stopping at the
    # first error. "outside a transaction": a test-only migration on top with
    # a CREATE INDEX CONCURRENTLY, which psql must get outside BEGIN/COMMIT.
    from_sql, migrated = new_database("psql_file"), new_database("psql_migrate")
    if steps == "portqueue":
        script, revision = migration_sql(), HEAD
        migrate(migrated)
    else:
        scripts = stepped_scripts(tmp_path)
        script, revision = stepped_sql(scripts), REVISION
        assert "COMMIT;\n\nINSERT INTO" in script and "CONCURRENTLY" in script
        migrate_stepped(migrated, scripts)
    path = tmp_path / "portqueue.sql"
    path.write_text(script)
    result = subprocess.run(
        ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", from_sql, "-f", str(path)],
        capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    with psycopg.connect(from_sql, autocommit=True) as conn:
        built = schema_catalog(conn, "portqueue")
    with psycopg.connect(migrated, autocommit=True) as conn:
        assert built == schema_catalog(conn, "portqueue")
    assert built["alembic_version"] == [(revision,)]


def test_sql_needs_no_dsn_at_all(tmp_path: Path) -> None:
    result = run_cli("migrate", "--sql", "--schema", "jobs", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert 'CREATE TABLE "jobs".job' in result.stdout
    assert '"portqueue"' not in result.stdout


def test_migrate_creates_the_schema(new_database: Callable[[str], str], tmp_path: Path) -> None:
    dsn = new_database("cli")
    result = run_cli("migrate", "--dsn", dsn, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        f"portqueue: schema 'portqueue' is at revision {HEAD} (head)"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        catalog = schema_catalog(conn, "portqueue")
    assert tables(catalog) == EXPECTED_TABLES
    assert catalog["alembic_version"] == [(HEAD,)]


def test_migrate_reads_dsn_and_schema_from_the_environment(
    new_database: Callable[[str], str], tmp_path: Path
) -> None:
    dsn = new_database("cli_env")
    env = cli_env(PORTQUEUE_DSN=dsn, PORTQUEUE_SCHEMA="from_env")
    result = run_cli("migrate", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "'from_env'" in result.stdout
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert tables(schema_catalog(conn, "from_env")) == EXPECTED_TABLES
        assert conn.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname = 'portqueue'").fetchone() == (0,)


def test_missing_dsn_is_a_usage_error() -> None:
    result = run_cli("migrate")
    assert result.returncode == 2
    assert "--dsn" in result.stderr and "PORTQUEUE_DSN" in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (["--schema", 'x"; DROP SCHEMA public; --'], {}),
        (["--schema", "1starts_with_digit", "--sql"], {}),
        ([], {"PORTQUEUE_SCHEMA": "has-dash"}),
    ],
    ids=["injection", "with-sql", "from-env"],
)
def test_bad_schema_is_a_usage_error(args: list[str], env: dict[str, str]) -> None:
    # The DSN points at a closed port: exit 2 (not 1) shows the schema was
    # refused before any connection was tried.
    result = run_cli(
        "migrate", "--dsn", CLOSED_PORT_DSN, *args, env=cli_env(**env))
    assert result.returncode == 2, result.stderr
    assert "schema" in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize(
    "dsn",
    [
        f"postgresql://u:{PASSWORD}@127.0.0.1:1/x",
        f"host=127.0.0.1 port=1 user=u password={PASSWORD} dbname=x",
        f"host=127.0.0.1 port=1 user=u password='{PASSWORD}' dbname=x",
        f"postgresql://127.0.0.1:1/x?user=u&password={PASSWORD}",
        f"postgresql://u:{PASSWORD}%40x@127.0.0.1:1/x",
    ],
    ids=["url", "keyword", "keyword-quoted", "url-query", "url-percent-encoded"],
)
def test_unreachable_database_fails_without_the_password(dsn: str) -> None:
    result = run_cli("migrate", "--dsn", dsn)
    assert result.returncode == 1, result.stderr
    assert "migration failed" in result.stderr
    assert PASSWORD not in result.stdout + result.stderr


@pytest.mark.parametrize(
    "dsn",
    [
        # libpq quotes the offending token, here the password itself.
        f"postgresql://u:{PASSWORD}%ZZ@127.0.0.1:1/x",
        f"host=127.0.0.1 password={PASSWORD} port",
    ],
    ids=["bad-percent-escape", "missing-equals"],
)
def test_unparsable_dsn_is_a_usage_error_without_the_password(dsn: str) -> None:
    result = run_cli("migrate", "--dsn", dsn)
    assert result.returncode == 2, result.stderr
    assert "dsn" in result.stderr
    assert PASSWORD not in result.stdout + result.stderr


def test_server_error_fails_without_the_password(pg_server_dsn: str) -> None:
    # The server answers (trust auth ignores the password) but refuses: the
    # error comes from the server this time, not from the connection attempt.
    params = conninfo_to_dict(pg_server_dsn)
    params.update(dbname="portqueue_no_such_database", password=PASSWORD)
    result = run_cli("migrate", "--dsn", make_conninfo("", **params))
    assert result.returncode == 1, result.stderr
    assert "portqueue_no_such_database" in result.stderr
    assert PASSWORD not in result.stdout + result.stderr


def test_help_shows_an_example_and_no_secret() -> None:
    result = run_cli("migrate", "--help", env=cli_env(PORTQUEUE_DSN=CLOSED_PORT_DSN))
    assert result.returncode == 0, result.stderr
    assert "portqueue migrate --dsn" in result.stdout
    assert "PORTQUEUE_DSN" in result.stdout
    assert PASSWORD not in result.stdout
    top = run_cli("--help")
    assert top.returncode == 0 and "migrate" in top.stdout


def test_database_ahead_of_the_code_fails_clearly(new_database: Callable[[str], str]) -> None:
    # A schema migrated by a newer portqueue: refuse, naming the unknown revision.
    dsn = new_database("cli_ahead")
    assert run_cli("migrate", "--dsn", dsn).returncode == 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE portqueue.alembic_version SET version_num = '9999'")
    result = run_cli("migrate", "--dsn", dsn)
    assert result.returncode == 1
    assert "9999" in result.stderr
