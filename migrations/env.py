"""Alembic environment for portqueue.

Run through ``portqueue migrate`` / ``PortQueue.migrate()``, which pass the target
schema and a connection in ``config.attributes``. Online runs hold an advisory
lock on the schema first, so any number of processes deploying at once
serialise here and all succeed; the version table lives in the schema.
"""

import time

from alembic import context
from sqlalchemy import Connection, text

config = context.config
schema: str = config.attributes["schema"]
quoted_schema: str = config.attributes["quoted_schema"]
lock_key: int = config.attributes["lock_key"]
# How often a migrator that waits for another one asks for the lock again.
POLL_SECONDS = 0.1


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


def hold_session_lock(connection: Connection) -> bool:
    """Take the lock for the session, so that it outlives the commits of a
    migration's steps outside a transaction; False, and no lock, behind a pooler.

    Polled in autocommit, not waited for: a statement waiting for the lock
    holds a snapshot, and the CREATE INDEX CONCURRENTLY of the migrator that
    has it waits for every older snapshot, so the two would deadlock
    (docs/retention.md, design point 7). Between polls a waiter holds none.
    It is released when the session ends (run_on_database closes it)."""
    connection.execution_options(isolation_level="AUTOCOMMIT")
    # A pooler (PgBouncer) gives its clients a backend key of its own: the
    # server session a lock would stay with is not this client's.
    direct = connection.scalar(text("SELECT pg_backend_pid()")) == (
        connection.connection.driver_connection.info.backend_pid)
    while direct and not connection.scalar(
            text("SELECT pg_try_advisory_lock(:key)"), {"key": lock_key}):
        time.sleep(POLL_SECONDS)
    connection.commit()  # SQLAlchemy's autobegun one; none on the server
    connection.execution_options(isolation_level=connection.default_isolation_level)
    return direct


def run_online() -> None:
    connection = config.attributes["connection"]
    session_lock = config.attributes["session_lock"] = hold_session_lock(connection)
    context.configure(
        connection=connection,
        version_table_schema=schema,
        transactional_ddl=True,
        transaction_per_migration=False,
    )
    with context.begin_transaction():
        if not session_lock:
            # Behind a pooler the transaction's lock still serialises
            # deployers (the transaction keeps its server connection);
            # portqueue.migrate.outside_transaction refuses there.
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
