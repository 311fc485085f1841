"""Migrations racing each other while workers run (scenario 12).

Two worker processes drain a stream of jobs on a schema at head, as a deploy
finds them; three ``portqueue migrate`` processes then run at once against it
(every deploy runs migrate), and three more against a schema of the same
database three revisions behind head, with a history in it. All exit 0, the
old schema ends exactly at head (the same catalog as a schema migrated in one
go, one version row), the live one is left as it was, and its workers never
notice: every job completes once. (Workers of this code cannot serve a schema
behind head: the newest migrations add columns the claim reads, and
``SchemaNotMigrated`` says so. Migrate first, then deploy.)

The five-processes-on-an-empty-database race on its own is
tests/migrations/test_concurrent_migrate.py; here three per schema are a race
all the same, and each more was a CLI start-up (Alembic's import) on a
2-core host.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from alembic.script import ScriptDirectory
from psycopg import sql

from portqueue import PortQueue
from portqueue.migrate import _config, head_revision, migrate
from tests.faults.harness import QUEUE, Fleet, assert_nothing_lost, count_where, stop_all
from tests.migrations.catalog import alembic_versions, schema_catalog
from tests.migrations.conftest import cli_command, cli_env
from tests.migrations.stepped import INDEX, REVISION, stepped_scripts
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

MIGRATORS = 3
STEPS_BEHIND = 3
BACKLOG = 2_000   # finished rows, so the old schema's new indexes take a moment to build


def revision_behind_head(steps: int) -> str:
    scripts = ScriptDirectory.from_config(_config("portqueue"))
    revision = head_revision()
    for _ in range(steps):
        down = scripts.get_revision(revision).down_revision
        assert isinstance(down, str), f"no single revision below {revision}"
        revision = down
    return revision


def test_migrations_racing_while_workers_drain(
    pg_dsn: str, schema: str, ledger_db: psycopg.Connection[Any], tmp_path: Path,
    report: Any,
) -> None:
    db = ledger_db
    old = f"{schema}_behind"
    db.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(old)))
    start = revision_behind_head(STEPS_BEHIND)
    migrate(pg_dsn, schema=old, revision=start)
    db.execute(sql.SQL(
        "INSERT INTO {} (id, queue, data, status, finished_at) "
        "SELECT gen_random_uuid(), 'archive', '{{}}', 'completed', now() "
        "FROM generate_series(1, %s)").format(sql.Identifier(old, "job")), (BACKLOG,))
    fleet = Fleet(pg_dsn, schema, tmp_path, db)
    migrators: list[subprocess.Popen[str]] = []
    try:
        with PortQueue(pg_dsn, schema=schema) as pq:
            workers = [fleet.worker(lease_seconds=2) for _ in range(2)]
            job_ids: list[str] = []

            def add(n: int) -> None:
                results = pq.add_jobs(queue=QUEUE, jobs=[
                    {"data": {"n": len(job_ids) + i, "sleep": 0.01}} for i in range(n)])
                job_ids.extend(r.job_id for r in results if r.job_id is not None)

            add(200)
            migrators = [subprocess.Popen(
                [*cli_command(), "migrate", "--dsn", pg_dsn, "--schema", target],
                env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for target in [old] * MIGRATORS + [schema] * MIGRATORS]
            started = time.monotonic()
            # Jobs keep arriving while the migrations run.
            while any(m.poll() is None for m in migrators):
                assert time.monotonic() - started < 120, "the migrations did not finish"
                add(5)
                time.sleep(0.1)  # the stream's pace
            migrated_s = time.monotonic() - started
            add(100)
            outputs = [m.communicate(timeout=10) for m in migrators]
            deadline = time.monotonic() + 60
            while count_where(db, schema, job_ids, "completed") < len(job_ids):
                assert time.monotonic() < deadline, [w.log() for w in workers]
                time.sleep(0.1)  # polling pace
            stop_all(workers)
            for worker in workers:
                assert "Traceback" not in worker.log(), worker.log()

        for migrator, (stdout, stderr) in zip(migrators, outputs, strict=True):
            assert migrator.returncode == 0, stderr
            assert f"at revision {head_revision()} (head)" in stdout, stdout
        assert schema_catalog(db, old) == schema_catalog(db, schema)
        for migrated in (old, schema):
            versions = db.execute(sql.SQL("SELECT version_num FROM {}").format(
                sql.Identifier(migrated, "alembic_version"))).fetchall()
            assert versions == [(head_revision(),)]
        figures = assert_nothing_lost(db, schema, job_ids)
        assert figures.statuses == {"completed": len(job_ids)}
        finished = db.execute(sql.SQL("SELECT count(*) FROM {}").format(
            sql.Identifier(old, "job"))).fetchone()
        assert finished == (BACKLOG,), "the old schema's history survives its upgrade"
    finally:
        for migrator in migrators:
            if migrator.poll() is None:
                migrator.kill()
        fleet.close()
        db.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(old)))
    report(figures, faults=f"{MIGRATORS} concurrent migrate from {start} to "
           f"{head_revision()} beside {MIGRATORS} on the live schema under 2 workers",
           migrate_s=f"{migrated_s:.1f}")


def _session_building_concurrently(db: psycopg.Connection[Any], dsn_database: str) -> int | None:
    """The server session of a migrator whose CREATE INDEX CONCURRENTLY waits."""
    row = db.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = %s"
        " AND application_name = 'portqueue:migrate'"
        " AND query LIKE 'CREATE INDEX CONCURRENTLY%%' AND wait_event = 'virtualxid'",
        [dsn_database]).fetchone()
    return None if row is None else int(row[0])


def _polling_for_the_lock(db: psycopg.Connection[Any], dsn_database: str) -> bool:
    return db.execute(
        "SELECT FROM pg_stat_activity WHERE datname = %s"
        " AND application_name = 'portqueue:migrate'"
        " AND query LIKE 'SELECT pg_try_advisory_lock(%%'", [dsn_database]).fetchone() is not None


@pytest.mark.parametrize("session", ["runs on", "terminated"])
def test_a_migrator_killed_in_a_step_outside_a_transaction_leaves_what_the_next_run_completes(
    pg_dsn: str, db: psycopg.Connection[Any], tmp_path: Path, session: str,
) -> None:
    # A migrator SIGKILLed inside its CREATE INDEX CONCURRENTLY: the schema
    # stays at the revision before, with the step's table made. Its server
    # session does not notice the client's end while it waits, so it holds
    # the lock and finishes the build ("runs on"), or it is terminated
    # mid-build and leaves an invalid index ("terminated"). Either way the
    # next run waits for the lock, runs the whole migration again and ends at
    # its revision with a valid index.
    stepped = "pq_stepped_killed"
    db.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(stepped)))
    migrate(pg_dsn, schema=stepped)
    scripts = stepped_scripts(tmp_path)
    database = str(psycopg.conninfo.conninfo_to_dict(pg_dsn)["dbname"])
    command = [sys.executable, "-m", "tests.migrations.stepped", pg_dsn, str(scripts), stepped]
    index = sql.Identifier(stepped, INDEX)
    try:
        with psycopg.connect(pg_dsn, autocommit=True) as writer:
            writer.execute("BEGIN")
            writer.execute(sql.SQL("LOCK TABLE {} IN ROW EXCLUSIVE MODE").format(
                sql.Identifier(stepped, "job")))
            killed = subprocess.Popen(command, env=cli_env(), stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL)
            building = wait_until(lambda: _session_building_concurrently(db, database),
                                  timeout=60, what="the migrator inside its step")
            killed.send_signal(signal.SIGKILL)
            killed.wait(timeout=10)
            if session == "terminated":
                db.execute("SELECT pg_terminate_backend(%s, 10000)", [building])
                assert db.execute(sql.SQL("SELECT indisvalid FROM pg_index WHERE indexrelid"
                                          " = to_regclass({})").format(sql.Literal(
                                              index.as_string(db)))).fetchone() == (False,)
            assert alembic_versions(db, stepped) == [(head_revision(),)]
            rerun = subprocess.Popen(command, env=cli_env(), stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
            if session == "runs on":
                # The killed migrator's session still holds the lock: the next
                # run waits for it, and starts nothing meanwhile.
                wait_until(lambda: _polling_for_the_lock(db, database), timeout=60,
                           what="the next run polling for the lock")
                assert db.execute(sql.SQL("SELECT count(*) FROM {}").format(
                    sql.Identifier(stepped, "step_run"))).fetchone() == (1,)
            writer.execute("COMMIT")
        stdout, stderr = rerun.communicate(timeout=120)
        assert rerun.returncode == 0, stderr
        assert stdout.strip() == f"at revision {REVISION}"
        assert alembic_versions(db, stepped) == [(REVISION,)]
        assert db.execute(sql.SQL("SELECT indisvalid FROM pg_index WHERE indexrelid"
                                  " = to_regclass({})").format(sql.Literal(
                                      index.as_string(db)))).fetchone() == (True,)
        runs = db.execute(sql.SQL("SELECT count(*) FROM {}").format(
            sql.Identifier(stepped, "step_run"))).fetchone()
        assert runs == (2,), "the step ran again, once"
    finally:
        db.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(stepped)))
