"""Schema migrations (Alembic), serialised across processes by an advisory lock."""

from __future__ import annotations

import io
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING

import psycopg
from psycopg import sql

from portqueue.resources import resource_dir
from portqueue.validation import schema_name

if TYPE_CHECKING:
    from alembic.config import Config

# Alembic and SQLAlchemy are imported where they are used: together they
# would be most of `import portqueue` (docs/performance.md), which every
# producer and worker pays and only a migration needs.


def _lock_key(schema: str) -> int:
    # One lock per schema, stable across processes and Python versions.
    return zlib.crc32(f"portqueue.migrate:{schema}".encode())


def _config(schema: str, output: io.StringIO | None = None) -> Config:
    from alembic.config import Config

    config = Config(output_buffer=output) if output is not None else Config()
    config.set_main_option("script_location", str(resource_dir("migrations")))
    config.attributes["schema"] = schema
    config.attributes["quoted_schema"] = sql.Identifier(schema).as_string()
    config.attributes["lock_key"] = _lock_key(schema)
    return config


def migrate(dsn: str, *, schema: str = "portqueue", revision: str = "head") -> None:
    """Bring ``schema`` up to ``revision``; safe to run from many processes at once."""
    from alembic import command

    run_on_database(dsn, schema_name(schema), lambda config: command.upgrade(config, revision))


def run_on_database(dsn: str, schema: str, run: Callable[[Config], None]) -> None:
    """Run an Alembic command (``run(config)``) on ``dsn`` for ``schema``, and commit.

    ``migrate`` upgrades with it; the migration tests also downgrade."""
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    engine = create_engine(
        "postgresql+psycopg://",
        creator=lambda: psycopg.connect(dsn, application_name="portqueue:migrate"),
        poolclass=NullPool,
    )
    try:
        with engine.connect() as connection:
            config = _config(schema)
            config.attributes["connection"] = connection
            run(config)
            connection.commit()
    finally:
        engine.dispose()


def head_revision() -> str:
    """The latest revision in migrations/ (what ``migrate`` brings a schema to)."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(_config("portqueue")).get_current_head()
    if head is None:
        raise RuntimeError("portqueue's migrations/ has no head revision")
    return head


def migration_sql(*, schema: str = "portqueue", revision: str = "head") -> str:
    """The SQL ``migrate`` would run on an empty database, without touching one."""
    from alembic import command

    schema = schema_name(schema)
    output = io.StringIO()
    command.upgrade(_config(schema, output), revision, sql=True)
    return output.getvalue()


def outside_transaction(*statements: str, indexes: tuple[str, ...] = ()) -> None:
    """For a migration's ``upgrade()``: run ``statements`` outside its transaction,
    each on its own (``CREATE INDEX CONCURRENTLY``, ``DETACH PARTITION …
    CONCURRENTLY``: PostgreSQL refuses them in a transaction block, and a
    string of several statements is one).

    What the run did before is committed first, and the migration's revision
    is written only once all of it has run: a migrator stopped in between
    leaves the schema at the revision before, with some of the new objects
    made, and the next run runs the whole migration again. So each of its
    statements, before and after this call, must be re-runnable (``IF NOT
    EXISTS``, ``IF EXISTS``). ``indexes``, qualified names, are those the
    statements build with ``CREATE INDEX CONCURRENTLY IF NOT EXISTS``: one an
    interrupted build left invalid is dropped first and built again, which
    ``IF NOT EXISTS`` alone would keep. ``migrate --sql`` prints the
    statements between a ``COMMIT`` and a ``BEGIN``, and ``psql`` runs them so."""
    from alembic import context, op
    from alembic.util import CommandError
    from sqlalchemy import text

    offline = context.is_offline_mode()
    if not offline and not context.config.attributes["session_lock"]:
        # Before anything of this run is committed: the transaction's lock
        # would end at the commit, and no session lock holds through a pooler.
        raise CommandError(
            "this migration runs steps outside a transaction, which need a lock held "
            "by the session: run migrate connected to PostgreSQL directly, not through "
            "a connection pooler such as PgBouncer")
    with op.get_context().autocommit_block():
        for index in () if offline else indexes:  # --sql: an empty database
            # The name as the catalog has it, quoted part by part: the caller's
            # text may quote the schema or not.
            invalid = op.get_bind().execute(text(
                "SELECT n.nspname, c.relname FROM pg_index AS i"
                " JOIN pg_class AS c ON c.oid = i.indexrelid"
                " JOIN pg_namespace AS n ON n.oid = c.relnamespace"
                " WHERE i.indexrelid = to_regclass(:index) AND NOT i.indisvalid"),
                {"index": index}).first()
            if invalid is not None:
                op.execute(sql.SQL("DROP INDEX CONCURRENTLY {}").format(
                    sql.Identifier(invalid.nspname, invalid.relname)).as_string())
        for statement in statements:
            op.execute(statement)
