"""A test-only migration with a step outside the migration's transaction
(``CREATE INDEX CONCURRENTLY``), on top of portqueue's own, in a script
location of its own: ``stepped_scripts(directory)``.

``python -m tests.migrations.stepped DSN SCRIPTS SCHEMA`` runs ``migrate`` as
``portqueue migrate`` does, on those scripts: the racing and killed migrators
of tests/migrations/test_concurrent_migrate.py and
tests/faults/test_migrate_concurrently.py."""

from __future__ import annotations

import io
import shutil
import sys
from pathlib import Path

from alembic.config import Config

from portqueue.migrate import _config, head_revision, run_on_database
from portqueue.resources import resource_dir

REVISION = "stepped"
INDEX = "job_stepped_idx"

MIGRATION = '''"""Test only: a step outside the transaction, each step re-runnable."""

from alembic import context, op

from portqueue.migrate import outside_transaction

revision = "{revision}"
down_revision = "{down}"
branch_labels = None
depends_on = None


def upgrade() -> None:
    schema = context.config.attributes["quoted_schema"]
    # Every run of the step leaves a row: how many times it ran.
    op.execute(f"CREATE TABLE IF NOT EXISTS {{schema}}.step_run (pid integer NOT NULL)")
    outside_transaction(
        f"INSERT INTO {{schema}}.step_run VALUES (pg_backend_pid())",
        f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {index} ON {{schema}}.job (created_at)",
        indexes=(f"{{schema}}.{index}",))
    op.execute(f"COMMENT ON INDEX {{schema}}.{index} IS 'after the step'")


def downgrade() -> None:
    schema = context.config.attributes["quoted_schema"]
    op.execute(f"DROP INDEX {{schema}}.{index}; DROP TABLE {{schema}}.step_run")
'''


def stepped_scripts(directory: Path) -> Path:
    """portqueue's migrations and the test-only one on top, in ``directory``."""
    scripts = directory / "stepped_migrations"
    shutil.copytree(resource_dir("migrations"), scripts,
                    ignore=shutil.ignore_patterns("__pycache__"))
    (scripts / "versions" / "9999_stepped.py").write_text(
        MIGRATION.format(revision=REVISION, down=head_revision(), index=INDEX))
    return scripts


def migrate_stepped(dsn: str, scripts: Path, schema: str = "portqueue") -> None:
    from alembic import command

    def upgrade(config: Config) -> None:
        config.set_main_option("script_location", str(scripts))
        command.upgrade(config, "head")

    run_on_database(dsn, schema, upgrade)


def stepped_sql(scripts: Path, schema: str = "portqueue") -> str:
    """What ``migrate --sql`` prints for these scripts."""
    from alembic import command

    output = io.StringIO()
    config = _config(schema, output)
    config.set_main_option("script_location", str(scripts))
    command.upgrade(config, "head", sql=True)
    return output.getvalue()


if __name__ == "__main__":
    migrate_stepped(sys.argv[1], Path(sys.argv[2]), sys.argv[3])
    print(f"at revision {REVISION}")
