"""docs/operations.md, "Trading commit durability for latency": a worker whose
DSN sets ``synchronous_commit=off`` commits each of its own writes that way (its
claims, its completions, a handler's ``job.transaction()``), while jobs added by
another client stay durable. A row trigger records the setting in force when
each write to the job table happened."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from portqueue import PortQueue
from tests.support.waiting import wait_until
from tests.support.workers import finished_row

Db = psycopg.Connection[Any]


EFFECTS = "test_commit_mode_effects"


@pytest.fixture
def commit_modes(db: Db, schema: str) -> Iterator[sql.Composable]:
    """A table of (status written, synchronous_commit in force), filled by a trigger,
    and one for a handler's effects (EFFECTS); both dropped afterwards."""
    table = sql.Identifier(schema, "test_commit_modes")
    function = sql.Identifier(schema, "test_record_commit_mode")
    job = sql.Identifier(schema, "job")
    effects = sql.Identifier(schema, EFFECTS)
    db.execute(sql.SQL("""
        CREATE TABLE {effects} (job_id uuid, mode text);
        CREATE TABLE {table} (job_id uuid, status text, mode text, seq serial);
        CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO {table} (job_id, status, mode)
            VALUES (NEW.id, NEW.status::text, current_setting('synchronous_commit'));
            RETURN NULL;
        END $$;
        CREATE TRIGGER test_record_commit_mode AFTER INSERT OR UPDATE ON {job}
            FOR EACH ROW EXECUTE FUNCTION {function}();
    """).format(table=table, function=function, job=job, effects=effects))
    try:
        yield table
    finally:
        db.execute(sql.SQL("DROP FUNCTION {} CASCADE; DROP TABLE {}, {}")
                   .format(function, table, effects))


def modes(db: Db, table: sql.Composable, job_id: str) -> list[tuple[str, str]]:
    rows = db.execute(sql.SQL("SELECT status, mode FROM {} WHERE job_id = %s ORDER BY seq")
                      .format(table), [job_id]).fetchall()
    return [(row[0], row[1]) for row in rows]


def test_a_worker_dsn_without_flush_waits_covers_its_writes_and_not_the_producers(
    pq: PortQueue, pg_dsn: str, schema: str, db: Db, commit_modes: sql.Composable,
) -> None:
    effects = sql.Identifier(schema, EFFECTS)
    worker_dsn = make_conninfo(pg_dsn, options="-c synchronous_commit=off")
    worker = PortQueue(worker_dsn, schema=schema)
    try:
        @worker.handler("modes")
        def handle(job: Any) -> None:
            if job.data == "in a transaction":
                with job.transaction() as conn:
                    conn.execute(sql.SQL(
                        "INSERT INTO {} VALUES (%s, current_setting('synchronous_commit'))")
                        .format(effects), [job.id])

        plain = pq.add_job(queue="modes", data="plain").job_id
        transactional = pq.add_job(queue="modes", data="in a transaction").job_id
        assert plain and transactional
        worker.start(maintenance=False, scheduler=False, poll_interval=0.2)
        for job_id in (plain, transactional):
            wait_until(lambda: finished_row(db, schema, job_id), what=f"job {job_id}")  # noqa: B023
    finally:
        worker.stop()
        worker.close()
    for job_id in (plain, transactional):
        assert modes(db, commit_modes, job_id) == [
            ("pending", "on"), ("active", "off"), ("completed", "off")], job_id
    (effect,) = db.execute(sql.SQL("SELECT mode FROM {}").format(effects)).fetchall()
    assert effect == ("off",), "job.transaction() runs on the worker's DSN too"
