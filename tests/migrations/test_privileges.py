"""An application role without CREATE on the database can run an up-to-date migrate()."""

from __future__ import annotations

import os
from collections.abc import Callable

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from portqueue.migrate import migrate


def test_up_to_date_migrate_needs_no_create_privilege(
    new_database: Callable[[str], str],
) -> None:
    owner_dsn = new_database("priv")
    role = f"pq_app_{os.getpid()}"
    migrate(owner_dsn)
    with psycopg.connect(owner_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        database = conn.info.dbname
        conn.execute(sql.SQL("REVOKE CREATE ON DATABASE {} FROM PUBLIC").format(
            sql.Identifier(database)))
        conn.execute(sql.SQL("GRANT USAGE ON SCHEMA portqueue TO {}").format(
            sql.Identifier(role)))
        conn.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA portqueue TO {}").format(
            sql.Identifier(role)))
    app_dsn = make_conninfo(owner_dsn, user=role)
    try:
        migrate(app_dsn)  # nothing to do, so nothing it may not do
        with psycopg.connect(app_dsn) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("CREATE SCHEMA proof_the_role_lacks_create")
    finally:
        with psycopg.connect(owner_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
