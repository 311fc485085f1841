"""The PostgreSQL behaviours the partitioned-history design rests on, reproduced.

    python bench/partition_traps.py [--dsn DSN]

docs/retention.md ("Partitioned history: the design") lists what declarative
partitioning changes for portqueue's job table. This script reproduces each
point in a scratch schema (``partition_traps``, dropped first and after) on
a toy table with the same partition layout, prints what the server did, and
exits 1 if any behaviour differs from what the design assumes: run it on
each PostgreSQL version the project supports before building on the design.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg

SCHEMA = "partition_traps"

# In the schema SCHEMA names, which main() creates and puts first on the search path.
SETUP = """
CREATE TYPE st AS ENUM ('pending', 'active', 'completed', 'failed', 'waiting');
CREATE TABLE job (id int NOT NULL, seq bigint GENERATED ALWAYS AS IDENTITY, status st NOT NULL,
                  finished_at timestamptz, k text, note text)
    PARTITION BY LIST (status);
CREATE TABLE job_live PARTITION OF job FOR VALUES IN ('pending', 'active', 'waiting');
CREATE TABLE job_finished PARTITION OF job FOR VALUES IN ('completed', 'failed')
    PARTITION BY RANGE (finished_at);
CREATE TABLE job_finished_default PARTITION OF job_finished DEFAULT;
CREATE TABLE job_finished_now PARTITION OF job_finished
    FOR VALUES FROM (now() - interval '1 day') TO (now() + interval '1 day');
CREATE UNIQUE INDEX ON job_live (k) WHERE k IS NOT NULL;
CREATE TABLE log (what text);
CREATE FUNCTION log_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        INSERT INTO log SELECT TG_OP || ' ' || TG_LEVEL || ' sees ' || count(*)
        FROM job WHERE id = OLD.id;
    ELSE
        INSERT INTO log VALUES (TG_OP || ' ' || TG_LEVEL);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER u AFTER UPDATE OF status ON job FOR EACH ROW EXECUTE FUNCTION log_row();
CREATE TRIGGER d AFTER DELETE ON job FOR EACH ROW EXECUTE FUNCTION log_row();
CREATE TRIGGER i AFTER INSERT ON job FOR EACH ROW EXECUTE FUNCTION log_row();
CREATE TRIGGER s AFTER INSERT ON job REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION log_row();
"""


def error_of(conn: psycopg.Connection[Any], statement: str) -> str:
    try:
        conn.execute(statement)
    except psycopg.Error as error:
        return str(error.diag.message_primary)
    return "no error"


def logged(conn: psycopg.Connection[Any], statement: str) -> list[str]:
    conn.execute("DELETE FROM log")
    conn.execute(statement)
    return [row[0] for row in conn.execute("SELECT what FROM log ORDER BY what")]


def racing(dsn: str, prepare: str, hold: str, statement: str) -> str:
    """Run ``statement`` while another session holds ``hold`` uncommitted for a second."""
    with psycopg.connect(dsn, autocommit=True) as setup:
        setup.execute(f"SET search_path = {SCHEMA}")
        setup.execute(prepare)
    locked = threading.Event()

    def holder() -> None:
        with psycopg.connect(dsn) as conn:
            conn.execute(f"SET search_path = {SCHEMA}")
            conn.execute(hold)
            locked.set()
            time.sleep(1.0)  # the racing statement waits on the held row meanwhile
            conn.commit()

    thread = threading.Thread(target=holder)
    thread.start()
    locked.wait(10)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"SET search_path = {SCHEMA}")
        try:
            cursor = conn.execute(statement)
            outcome = f"{cursor.rowcount} row(s)"
        except psycopg.Error as error:
            outcome = f"{error.sqlstate}: {error.diag.message_primary}"
    thread.join()
    return outcome


def racing_move(dsn: str, statement: str) -> str:
    """Run ``statement`` while another session moves row 1 to job_finished."""
    return racing(dsn, "DELETE FROM job WHERE id = 1;"
                       " INSERT INTO job (id, status) VALUES (1, 'active')",
                  "UPDATE job SET status = 'completed', finished_at = now() WHERE id = 1",
                  statement)


# A key table whose add reclaims a key when the job it names is gone: the
# subquery reads the statement's snapshot, older than the winner's commit.
RECLAIMING_ADD = """
WITH k AS (
    INSERT INTO job_key VALUES ('x', %s)
    ON CONFLICT (k) DO UPDATE SET job_id = EXCLUDED.job_id
    WHERE NOT EXISTS (SELECT FROM job WHERE job.id = job_key.job_id)
    RETURNING job_id)
INSERT INTO job (id, status, k) SELECT job_id, 'pending', NULL FROM k
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    moved = "tuple to be locked was already moved to another partition due to concurrent update"
    checks: list[tuple[str, Callable[[], object], object]] = []
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        version = conn.execute("SHOW server_version").fetchone()
        major = conn.info.server_version // 10000
        conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        conn.execute(f"CREATE SCHEMA {SCHEMA}")
        conn.execute(f"SET search_path = {SCHEMA}")
        conn.execute(SETUP)
        conn.execute("INSERT INTO job (id, status) VALUES (10, 'pending'), (11, 'pending')")
        checks = [
            ("1. a unique index on the root must hold the partition keys",
             lambda: error_of(conn, "CREATE UNIQUE INDEX ON job (id)"),
             "unique constraint on partitioned table must include all partitioning columns"),
            ("1. ON CONFLICT with an arbiter, through the root, finds no leaf index",
             lambda: error_of(conn, "INSERT INTO job (id, status, k) VALUES (20, 'pending', 'a')"
                                    " ON CONFLICT (k) WHERE k IS NOT NULL DO NOTHING"),
             "there is no unique or exclusion constraint matching the ON CONFLICT specification"),
            ("1. ON CONFLICT DO NOTHING through the root uses the live leaf's index",
             lambda: [conn.execute("INSERT INTO job (id, status, k) VALUES (%s, 'pending', 'a')"
                                   " ON CONFLICT DO NOTHING", (n,))
                      for n in (21, 22)] and conn.execute(
                          "SELECT count(*) FROM job WHERE k = 'a'").fetchone(),
             (1,)),
            ("1. ... but not once the keyed job has moved to job_finished",
             lambda: [conn.execute("UPDATE job SET status = 'completed', finished_at = now()"
                                   " WHERE k = 'a'"),
                      conn.execute("INSERT INTO job (id, status, k) VALUES (23, 'pending', 'a')"
                                   " ON CONFLICT DO NOTHING")] and conn.execute(
                          "SELECT count(*) FROM job WHERE k = 'a'").fetchone(),
             (2,)),
            ("1. a key table's add that reclaims keys of removed jobs lets a racer in",
             lambda: racing(args.dsn, "CREATE TABLE job_key (k text PRIMARY KEY, job_id int)",
                            RECLAIMING_ADD % 50, RECLAIMING_ADD % 51) and conn.execute(
                                "SELECT count(*) FROM job WHERE id IN (50, 51)").fetchone(),
             (2,)),
            # PostgreSQL 17 gave the leaves the root's identity (an INSERT into a
            # leaf takes the next value, and refuses one given without OVERRIDING
            # SYSTEM VALUE); 15 and 16 leave the leaf's column a plain one.
            ("1. an INSERT into a leaf gets no value from the root's identity column"
             if major < 17 else "1. an INSERT into a leaf takes the root's identity (17+)",
             lambda: error_of(conn, "INSERT INTO job_live (id, status) VALUES (30, 'pending')"),
             'null value in column "seq" of relation "job_live" violates not-null constraint'
             if major < 17 else "no error"),
            ("1. a leaf refuses a seq given without OVERRIDING SYSTEM VALUE (17+)"
             if major >= 17 else "1. a leaf takes a seq given without OVERRIDING SYSTEM VALUE",
             lambda: error_of(conn, "INSERT INTO job_live (id, seq, status) VALUES"
                                    " (31, nextval(pg_get_serial_sequence('job', 'seq')),"
                                    " 'pending')"),
             'cannot insert a non-DEFAULT value into column "seq"' if major >= 17
             else "no error"),
            ("1. OVERRIDING SYSTEM VALUE with nextval inserts into a leaf on every version",
             lambda: error_of(conn, "INSERT INTO job_live (id, seq, status) OVERRIDING SYSTEM"
                                    " VALUE VALUES (32, nextval(pg_get_serial_sequence("
                                    "'job', 'seq')), 'pending')"),
             "no error"),
            ("2. a move fires DELETE (seeing the moved row) and INSERT row triggers only",
             lambda: logged(conn, "UPDATE job SET status = 'completed', finished_at = now()"
                                  " WHERE id = 10"),
             ["DELETE ROW sees 1", "INSERT ROW"]),
            ("2. an update within a partition fires the UPDATE row trigger",
             lambda: logged(conn, "UPDATE job SET status = 'active' WHERE id = 11"),
             ["UPDATE ROW"]),
            ("2. an INSERT into a leaf skips the root's statement trigger",
             lambda: logged(conn, "INSERT INTO job_live (id, seq, status) OVERRIDING SYSTEM"
                                  " VALUE VALUES (33, nextval(pg_get_serial_sequence("
                                  "'job', 'seq')), 'pending')"),
             ["INSERT ROW"]),
            ("2. ... which a statement trigger (transition table) on the leaf catches",
             lambda: [conn.execute("CREATE TRIGGER ls AFTER INSERT ON job_live REFERENCING NEW"
                                   " TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION"
                                   " log_row()")] and logged(
                 conn, "INSERT INTO job_live (id, seq, status) OVERRIDING SYSTEM VALUE"
                       " VALUES (34, nextval(pg_get_serial_sequence('job', 'seq')),"
                       " 'pending')"),
             ["INSERT ROW", "INSERT STATEMENT"]),
            ("2. an INSERT through the root skips the leaf's statement trigger",
             lambda: logged(conn, "INSERT INTO job (id, status) VALUES (35, 'pending')"),
             ["INSERT ROW", "INSERT STATEMENT"]),
            ("2. a move back to the live leaf fires no statement trigger either",
             lambda: logged(conn, "UPDATE job SET status = 'pending', finished_at = NULL"
                                  " WHERE id = 10"),
             ["DELETE ROW sees 1", "INSERT ROW"]),
            ("3. an UPDATE racing a move fails (single table: 0 rows)",
             lambda: racing_move(args.dsn, "UPDATE job SET note = 'beat'"
                                           " WHERE id = 1 AND status = 'active'"),
             f"40001: {moved}"),
            ("3. SELECT ... FOR UPDATE racing a move fails",
             lambda: racing_move(args.dsn, "SELECT FROM job WHERE id = 1 FOR UPDATE"),
             f"40001: {moved}"),
            ("3. DELETE racing a move fails",
             lambda: racing_move(args.dsn, "DELETE FROM job WHERE id = 1"),
             f"40001: {moved}"),
            ("3. FOR UPDATE SKIP LOCKED racing a move skips the row",
             lambda: racing_move(args.dsn, "SELECT FROM job WHERE id = 1"
                                           " FOR UPDATE SKIP LOCKED"),
             "0 row(s)"),
            ("5. DETACH CONCURRENTLY is refused while a default partition exists",
             lambda: error_of(conn, "ALTER TABLE job_finished DETACH PARTITION"
                                    " job_finished_now CONCURRENTLY"),
             "cannot detach partitions concurrently when a default partition exists"),
            ("5. a new partition cannot cover rows already in the default",
             lambda: [conn.execute("INSERT INTO job (id, status, finished_at)"
                                   " VALUES (40, 'completed', '2030-01-01 12:00+00')")] and
             error_of(conn, "CREATE TABLE job_finished_2030 PARTITION OF job_finished"
                            " FOR VALUES FROM ('2030-01-01') TO ('2030-01-02')"),
             'updated partition constraint for default partition "job_finished_default"'
             " would be violated by some row"),
        ]
        print(f"PostgreSQL {version[0] if version else '?'}")
        failed = 0
        for title, run, expected in checks:
            got = run()
            ok = got == expected
            failed += not ok
            print(f"{'ok  ' if ok else 'DIFF'} {title}" + ("" if ok else f"\n     got {got!r}"
                                                           f"\n     expected {expected!r}"))
        conn.execute(f"DROP SCHEMA {SCHEMA} CASCADE")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
