"""Alembic environment for portqueue.

Run through ``portqueue migrate`` / ``PortQueue.migrate()``, which pass the target
schema and a connection in ``config.attributes``. Online runs take a
transaction-scoped advisory lock first, so any number of processes deploying
at once serialise here and all succeed; the version table lives in the schema.
"""

from alembic import context
from sqlalchemy import text

config = context.config
schema: str = config.attributes["schema"]
quoted_schema: str = config.attributes["quoted_schema"]
lock_key: int = config.attributes["lock_key"]


def run_offline() -> None:
    context.configure(
        url="postgresql://",
        literal_binds=True,
        version_table_schema=schema,
        transactional_ddl=True,
        as_sql=True,
    )
    with context.begin_transaction():
        context.execute(f"CREATE SCHEMA IF NOT EXISTS {quoted_schema}")
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes["connection"]
    context.configure(
        connection=connection,
        version_table_schema=schema,
        transactional_ddl=True,
        transaction_per_migration=False,
    )
    with context.begin_transaction():
        # Before anything reads the version table: the second deployer waits
        # here, then sees the first one's work and has nothing left to do.
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": lock_key})
        # Only when missing: CREATE SCHEMA IF NOT EXISTS still demands the
        # CREATE privilege on the database, which an application role that
        # merely runs an up-to-date migrate() need not have.
        exists = connection.execute(
            text("SELECT FROM pg_namespace WHERE nspname = :schema"), {"schema": schema}
        ).first()
        if exists is None:
            connection.execute(text(f"CREATE SCHEMA {quoted_schema}"))
        context.run_migrations()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
