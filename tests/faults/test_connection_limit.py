"""Issue 22, "Connections as a budget", and issue 23, "Many processes": on a
server of this test's own with a small ``max_connections``, worker processes
started beyond what it can take wait (one warning, no traceback, no exit),
join as running workers stop and free their connections, and none of the
running ones loses its LISTEN session meanwhile. Each process holds at most
its budget of 3, counted in pg_stat_activity by its application_name.

The server has room for the test's own connection, the producer's and three
workers, plus one spare slot: a waiting worker gets its first connection
there and must give it back, not hold it while it waits for the rest."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from portqueue import PortQueue
from tests.faults.harness import QUEUE, Fleet, Proc
from tests.faults.owned_server import OwnedServer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

SCHEMA = "budget"
RUNNING = 3
# The test's connection, the producer's pool of one, three workers of 3, a spare.
MAX_CONNECTIONS = 1 + 1 + RUNNING * 3 + 1
APP = "tests.faults.budget_app:pq"
WAITING_LINE = "the database has no connection free for it"
JOINED_LINE = "got its connections after waiting"


@pytest.fixture
def small_server(owned_server: OwnedServer) -> str:
    """The owned server (parametrized small below), migrated: its DSN."""
    with PortQueue(owned_server.dsn, schema=SCHEMA) as migrator:
        migrator.migrate()
    return owned_server.dsn


SMALL = pytest.mark.parametrize("owned_server", [{"max_connections": MAX_CONNECTIONS}],
                                indirect=True, ids=[f"max_connections={MAX_CONNECTIONS}"])


def sessions(db: psycopg.Connection[Any], name: str) -> list[tuple[str, str]]:
    """(role, query) of every session of the process named ``name``."""
    rows = db.execute("SELECT application_name, query FROM pg_stat_activity "
                      "WHERE application_name LIKE %s", [f"{name}:%"]).fetchall()
    return [(row[0].rsplit(":", 1)[-1], row[1]) for row in rows]


def listening(db: psycopg.Connection[Any], name: str) -> bool:
    return any(role == "listener" and (query.startswith("LISTEN") or query == "SELECT 1")
               for role, query in sessions(db, name))


def registered(db: psycopg.Connection[Any], proc: Proc) -> bool:
    query = sql.SQL("SELECT 1 FROM {} WHERE pid = %s").format(
        sql.Identifier(SCHEMA, "worker"))
    return db.execute(query, [proc.pid]).fetchone() is not None


def completed(db: psycopg.Connection[Any], job_ids: list[str]) -> int:
    query = sql.SQL("SELECT count(*) FROM {} WHERE id = ANY(%s::uuid[]) "
                    "AND status = 'completed'").format(sql.Identifier(SCHEMA, "job"))
    row = db.execute(query, [job_ids]).fetchone()
    return 0 if row is None else int(row[0])


@SMALL
def test_workers_past_the_connection_limit_wait_and_join_as_connections_free(
    small_server: str, tmp_path: Path,
) -> None:
    dsn = small_server
    with psycopg.connect(dsn, autocommit=True, application_name="test") as db, \
            PortQueue(dsn, schema=SCHEMA, pool_min_size=0, pool_max_size=1,
                      application_name="producer") as pq:
        fleet = Fleet(dsn, SCHEMA, tmp_path, db)
        try:
            def worker(name: str, ready: bool) -> Proc:
                # -m from the repository root: this checkout's portqueue.
                return fleet.worker(app=APP, module="portqueue.cli", ready=ready,
                                    BUDGET_APPLICATION_NAME=name)

            def wait_listening(name: str) -> None:
                wait_until(lambda: listening(db, name), 20, f"{name}'s LISTEN")

            def wait_joined(count: int) -> None:
                wait_until(lambda: sum(registered(db, proc) for proc in waiting.values())
                           == count, 45, f"{count} waiting worker(s) to join")

            running = {f"run{n}": worker(f"run{n}", ready=True) for n in range(RUNNING)}
            for name in running:
                wait_listening(name)
            waiting = {f"wait{n}": worker(f"wait{n}", ready=False) for n in range(2)}
            for proc in waiting.values():
                proc.wait_for_log(WAITING_LINE, timeout=30)
                assert proc.alive() and not registered(db, proc), proc.log()

            # The running workers go on working, and keep listening, meanwhile.
            job_ids = [r.job_id for r in pq.add_jobs(queue=QUEUE, jobs=[{"data": {}}] * 30)
                       if r.job_id is not None]
            wait_until(lambda: completed(db, job_ids) == len(job_ids), 30,
                       "the running workers to complete the jobs")
            for name, proc in running.items():
                assert listening(db, name), f"{name} lost its LISTEN session\n{proc.log()}"
                assert len(sessions(db, name)) <= 3, sessions(db, name)

            # Each stopped worker frees three connections: one waiting worker joins.
            for stopped, joining in zip(["run0", "run1"], [1, 2], strict=True):
                running[stopped].send(signal.SIGTERM)
                assert running[stopped].wait(20) == 0, running[stopped].log()
                wait_joined(joining)
            for name, proc in waiting.items():
                wait_listening(name)
                log = proc.log()
                assert log.count(WAITING_LINE) == 1, log
                assert JOINED_LINE in log, log
                assert "Traceback" not in log, log
                assert len(sessions(db, name)) <= 3, sessions(db, name)

            # The joined workers run jobs; the one still running never lost LISTEN.
            more = [r.job_id for r in pq.add_jobs(queue=QUEUE, jobs=[{"data": {}}] * 30)
                    if r.job_id is not None]
            wait_until(lambda: completed(db, more) == len(more), 30, "the jobs after joining")
            ran_by = db.execute(sql.SQL(
                "SELECT DISTINCT (output->>'pid')::int FROM {} WHERE id = ANY(%s::uuid[])"
            ).format(sql.Identifier(SCHEMA, "job")), [more]).fetchall()
            assert {row[0] for row in ran_by} <= {p.pid for p in fleet.procs}
            assert "LISTEN connection lost" not in running["run2"].log()
            for proc in [*running.values(), *waiting.values()]:
                assert "Traceback" not in proc.log(), proc.log()
        finally:
            fleet.close()


@SMALL
@pytest.mark.parametrize("app", [APP, "tests.faults.budget_app:apq"], ids=["thread", "async"])
def test_a_worker_waiting_for_connections_stops_on_sigterm(
    small_server: str, tmp_path: Path, app: str,
) -> None:
    """SIGTERM while it waits ends it at once, exit 0, having held nothing
    (with both hosts: ``PortQueue`` runs the worker on a thread,
    ``AsyncPortQueue`` on the CLI's loop)."""
    dsn = small_server
    with psycopg.connect(dsn, autocommit=True, application_name="test") as db:
        # Every other slot taken by idle sessions of the test's own.
        fillers = []
        try:
            for _ in range(MAX_CONNECTIONS - 1):
                fillers.append(psycopg.connect(dsn, autocommit=True,
                                               application_name="filler"))
            fleet = Fleet(dsn, SCHEMA, tmp_path, db)
            try:
                proc = fleet.worker(app=app, module="portqueue.cli", ready=False,
                                    BUDGET_APPLICATION_NAME="sigterm")
                proc.wait_for_log(WAITING_LINE, timeout=30)
                proc.send(signal.SIGTERM)
                assert proc.wait(15) == 0, proc.log()
                assert "stopped while waiting for connections" in proc.log(), proc.log()
                assert "Traceback" not in proc.log(), proc.log()
                assert not registered(db, proc)
            finally:
                fleet.close()
        finally:
            for filler in fillers:
                filler.close()
