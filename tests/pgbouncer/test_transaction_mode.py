"""portqueue through PgBouncer in transaction mode, in the default run: the
test PgBouncer is hostile enough to catch session state (it hands consecutive
transactions to different server connections), poll_only clients and one-off
maintenance passes work through it, and PORTQUEUE_TEST_PGBOUNCER's wiring
really routes clients through it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from alembic.util import CommandError
from psycopg import sql

from portqueue import PortQueue
from portqueue.maintenance import run_pass
from portqueue.migrate import _lock_key, head_revision, migrate
from tests.migrations.catalog import alembic_versions
from tests.migrations.stepped import migrate_stepped, stepped_scripts
from tests.pgbouncer import mode
from tests.pgbouncer.bouncer import Bouncer

# psycopg prepares a statement on its 5th execution on a connection.
ENOUGH_TO_PREPARE = 12


def server_pids(dsn: str, times: int) -> set[int]:
    with psycopg.connect(dsn, autocommit=True, prepare_threshold=None) as conn:
        return {conn.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
                for _ in range(times)}


def test_consecutive_transactions_land_on_different_server_connections(
    warm_bouncer: Bouncer, pg_dsn: str
) -> None:
    assert len(server_pids(pg_dsn, 6)) == 1, "direct: one session"
    assert len(server_pids(warm_bouncer.route(pg_dsn), 6)) > 1, "through PgBouncer: several"


def test_prepared_statements_break_through_it(
    warm_bouncer: Bouncer, pg_dsn: str, schema: str
) -> None:
    # Why poll_only turns them off, and proof this PgBouncer would catch a
    # connection that kept them on.
    with PortQueue(warm_bouncer.route(pg_dsn), schema=schema) as client, \
            pytest.raises(psycopg.errors.InvalidSqlStatementName):
        for n in range(ENOUGH_TO_PREPARE):
            client.get_job(job_id=client.add_job(queue="prepared", data=n).job_id)


def test_a_poll_only_client_produces_manages_and_reads_through_it(
    warm_bouncer: Bouncer, pg_dsn: str, schema: str
) -> None:
    with PortQueue(warm_bouncer.route(pg_dsn), schema=schema, poll_only=True) as client:
        for n in range(ENOUGH_TO_PREPARE):
            added = client.add_job(queue="bounced", data={"n": n})
            assert client.get_job(job_id=added.job_id).data == {"n": n}
        assert client.get_queue_stats(queue="bounced").counts
        assert client.cancel_job(job_id=added.job_id).outcome.value == "cancelled"


def test_run_pass_works_through_it(
    warm_bouncer: Bouncer, pg_dsn: str, schema: str, db: psycopg.Connection[Any]
) -> None:
    # Several pruner batches and a lock per service: enough repeated
    # statements on one connection to prepare, had run_pass allowed it.
    db.execute(f"""
        INSERT INTO {schema}.job (id, queue, data, status, attempt, finished_at, created_at)
        SELECT gen_random_uuid(), 'old', '1', 'completed', 1, now() - interval '30 days',
               now() - interval '30 days'
        FROM generate_series(1, 2500)""")  # noqa: S608 - the test schema's fixed name
    with PortQueue(pg_dsn, schema=schema) as client:
        client.add_job(queue="old", data=1)  # the queue row
    for _ in range(3):
        counts = run_pass(warm_bouncer.route(pg_dsn), schema=schema, default_retention_seconds=0)
    assert counts["pruner"] == 0
    row = db.execute(f"SELECT count(*) FROM {schema}.job WHERE status = 'completed'").fetchone()  # noqa: S608
    assert row == (0,)


def test_the_switch_routes_every_client_through_pgbouncer_with_poll_only(
    bouncer: Bouncer, pg_dsn: str, schema: str
) -> None:
    database = psycopg.conninfo.conninfo_to_dict(pg_dsn)["dbname"]
    before = bouncer.client_logins(str(database))
    with mode.activated(bouncer), PortQueue(pg_dsn, schema=schema) as client:
        assert client._settings.poll_only is True
        assert client._settings.dsn == bouncer.route(pg_dsn) != pg_dsn
        for n in range(ENOUGH_TO_PREPARE):
            client.add_job(queue="routed", data=n)
    assert bouncer.client_logins(str(database)) > before
    # Outside the block clients are built as written again.
    with PortQueue(pg_dsn, schema=schema) as direct:
        assert direct._settings.dsn == pg_dsn and direct._settings.poll_only is False


def _advisory_locks_held(db: psycopg.Connection[Any], schema: str) -> list[tuple[Any, ...]]:
    """Who holds ``schema``'s migration lock in this database."""
    return db.execute(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objid = %s"
        " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        [_lock_key(schema)]).fetchall()


def test_migrate_works_through_it_on_the_transactions_lock(
    warm_bouncer: Bouncer, pg_dsn: str, db: psycopg.Connection[Any]
) -> None:
    # A session-level lock taken through transaction pooling would stay with
    # whichever server connection ran it, held for nobody: migrate sees the
    # pooler and locks in its transaction instead, as it did before.
    schema = "pq_bounced_migrate"
    db.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    try:
        migrate(warm_bouncer.route(pg_dsn), schema=schema)
        assert alembic_versions(db, schema) == [(head_revision(),)]
        assert _advisory_locks_held(db, schema) == []
    finally:
        db.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def test_a_migration_with_steps_outside_a_transaction_is_refused_through_it(
    warm_bouncer: Bouncer, pg_dsn: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    schema = "pq_bounced_stepped"
    db.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    try:
        migrate(pg_dsn, schema=schema)
        with pytest.raises(CommandError, match="connected to PostgreSQL directly"):
            migrate_stepped(warm_bouncer.route(pg_dsn), stepped_scripts(tmp_path), schema)
        # Refused before anything of the run was committed.
        assert alembic_versions(db, schema) == [(head_revision(),)]
        assert db.execute("SELECT to_regclass(%s)", [f"{schema}.step_run"]).fetchone() == (None,)
        assert _advisory_locks_held(db, schema) == []
    finally:
        db.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
