"""The fault-injection harness: worker processes to signal, a ledger, and the
``assert_nothing_lost`` check every scenario ends with.

- ``Fleet`` spawns real processes (``portqueue worker tests.faults.app:pq`` or
  ``python -m tests.faults.…``), each logging to a file of its own, and kills
  whatever is still running when the test ends (SIGCONT first, for a stopped one).
- The ledger (``faults.ledger``) holds one row per handler event, written by
  the handler on its own connection: ``claimed`` before any work, so a claim
  that reached a handler is counted even when its process dies right after.
- ``faults.effect`` holds the side effects handlers write through
  ``job.transaction()``; a plain table, so a duplicate is a second row to count.

Nothing here sleeps to let something happen: every wait is a DB (or process)
condition polled until a deadline.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from portqueue import PortQueue
from portqueue.worker.job import Job
from tests.faults.proxy import Proxy
from tests.migrations.conftest import cli_command, cli_env
from tests.support.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.faults.app:pq"
QUEUE = "faults"
TERMINAL = frozenset({"completed", "failed", "cancelled", "expired"})
DB_POLL = 0.05

LEDGER_DDL = """
CREATE SCHEMA IF NOT EXISTS faults;
CREATE TABLE IF NOT EXISTS faults.ledger (
    job_id  uuid NOT NULL,
    attempt integer NOT NULL,
    pid     integer NOT NULL,
    event   text NOT NULL,
    at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
-- No unique constraint on purpose: it would turn a duplicate effect into an
-- error that hides it. Duplicates are counted instead.
CREATE TABLE IF NOT EXISTS faults.effect (
    job_id  uuid NOT NULL,
    attempt integer NOT NULL,
    pid     integer NOT NULL,
    at      timestamptz NOT NULL DEFAULT clock_timestamp()
);
TRUNCATE faults.ledger, faults.effect;
"""


def reset_ledger(db: psycopg.Connection[Any]) -> None:
    db.execute(LEDGER_DDL)


# --- processes ---


class Proc:
    """One subprocess with its combined output in a log file."""

    def __init__(self, name: str, popen: subprocess.Popen[bytes], log: Path) -> None:
        self.name = name
        self.popen = popen
        self.log_path = log

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def send(self, signum: signal.Signals) -> None:
        self.popen.send_signal(signum)

    def wait(self, timeout: float) -> int:
        """The exit code; fails the test (with the log) if it does not exit in time."""
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.name} (pid {self.pid}) still running after {timeout}s\n"
                f"{self.log()}") from None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def wait_for_log(self, text: str, timeout: float = 10.0) -> None:
        def seen() -> bool:
            if text in self.log():
                return True
            if not self.alive():
                raise AssertionError(f"{self.name} exited ({self.popen.returncode}) before "
                                     f"logging {text!r}\n{self.log()}")
            return False

        wait_until(seen, timeout, f"{self.name} to log {text!r}", interval=DB_POLL)

    def kill(self) -> None:
        if self.alive():
            for signum in (signal.SIGCONT, signal.SIGKILL):
                try:
                    self.popen.send_signal(signum)
                except ProcessLookupError:
                    break
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(10)


@dataclass
class Fleet:
    """Spawns worker processes for one test; ``close()`` kills what is left."""

    dsn: str
    schema: str
    logs: Path
    db: psycopg.Connection[Any]   # the test's autocommit connection, for polling
    procs: list[Proc] = field(default_factory=list)

    def env(self, **extra: str) -> dict[str, str]:
        return cli_env(PORTQUEUE_DSN=self.dsn, PORTQUEUE_SCHEMA=self.schema,
                       PYTHONUNBUFFERED="1", **extra)

    def _spawn(self, name: str, argv: Sequence[str], env: dict[str, str]) -> Proc:
        log = self.logs / f"{len(self.procs):02d}-{name}.log"
        with log.open("wb") as out:
            popen = subprocess.Popen(
                list(argv), cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                stdout=out, stderr=subprocess.STDOUT)
        proc = Proc(f"{name}#{len(self.procs)}", popen, log)
        self.procs.append(proc)
        return proc

    def worker(self, *args: str, lease_seconds: int = 2, concurrency: int = 4,
               maintenance: bool = True, poll_interval: float = 0.5,
               grace_seconds: float = 30.0, ready: bool = True,
               module: str | None = None, dead_letter_queue: str = "",
               app: str = APP, **env: str) -> Proc:
        """``portqueue worker tests.faults.app:pq`` (or ``python -m module worker
        …``, a wrapper with test hooks; or another ``app``, with ``env`` added to
        its environment); with ``ready``, returns once the worker has registered
        (its row is in the worker table)."""
        command = cli_command() if module is None else [sys.executable, "-m", module]
        argv = [*command, "worker", app, "--no-scheduler",
                "--poll-interval", str(poll_interval), "--grace-seconds", str(grace_seconds),
                *([] if maintenance else ["--no-maintenance"]), *args]
        proc = self._spawn("worker", argv, self.env(
            FAULT_LEASE_SECONDS=str(lease_seconds), FAULT_CONCURRENCY=str(concurrency),
            FAULT_DEAD_LETTER_QUEUE=dead_letter_queue, **env))
        if ready:
            self.wait_registered(proc)
        return proc

    def python(self, module: str, *args: str) -> Proc:
        """``python -m module args…`` from the repository root."""
        return self._spawn(module.rsplit(".", 1)[-1], [sys.executable, "-m", module, *args],
                           self.env())

    def wait_registered(self, proc: Proc, timeout: float = 20.0) -> None:
        query = sql.SQL("SELECT 1 FROM {} WHERE pid = %s").format(
            sql.Identifier(self.schema, "worker"))

        def registered() -> bool:
            if not proc.alive():
                raise AssertionError(f"{proc.name} exited ({proc.popen.returncode}) "
                                     f"before it registered\n{proc.log()}")
            return self.db.execute(query, [proc.pid]).fetchone() is not None

        wait_until(registered, timeout, f"{proc.name} to register", interval=DB_POLL)

    def close(self) -> None:
        for proc in self.procs:
            proc.kill()


def stop_all(workers: Sequence[Proc], timeout: float = 15.0) -> None:
    """SIGTERM every worker at once (each drains), then each must exit 0."""
    for worker in workers:
        worker.send(signal.SIGTERM)
    for worker in workers:
        assert worker.wait(timeout) == 0, worker.log()


# --- locks the handlers block on ---


def wait_barrier_waiters(db: psycopg.Connection[Any], key: int, waiters: int,
                         timeout: float = 20.0) -> None:
    """Wait until ``waiters`` sessions queue for advisory lock ``key`` (small keys)."""
    def queued() -> bool:
        row = db.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
            "AND classid = 0 AND objid = %s AND objsubid = 1 AND database = "
            "(SELECT oid FROM pg_database WHERE datname = current_database())",
            [key]).fetchone()
        return row is not None and row[0] >= waiters

    wait_until(queued, timeout, f"{waiters} sessions waiting on lock {key}", interval=DB_POLL)


# --- reading the state ---


def job(db: psycopg.Connection[Any], schema: str, job_id: str) -> dict[str, Any]:
    query = sql.SQL("SELECT *, status::text AS status, lease_expires_at > now() AS lease_live "
                    "FROM {} WHERE id = %s").format(sql.Identifier(schema, "job"))
    with db.cursor(row_factory=dict_row) as cursor:
        row = cursor.execute(query, [job_id]).fetchone()
    assert row is not None, f"job {job_id} is missing"
    return row


def ledger(db: psycopg.Connection[Any], job_id: str | None = None,
           event: str | None = "claimed") -> list[dict[str, Any]]:
    """Ledger rows in the order written, of one job and/or one event."""
    with db.cursor(row_factory=dict_row) as cursor:
        return cursor.execute(
            "SELECT job_id::text, attempt, pid, event, at FROM faults.ledger "
            "WHERE (%(job)s::uuid IS NULL OR job_id = %(job)s::uuid) "
            "AND (%(event)s::text IS NULL OR event = %(event)s::text) ORDER BY at",
            {"job": job_id, "event": event}).fetchall()


def effects(db: psycopg.Connection[Any], job_id: str) -> list[dict[str, Any]]:
    with db.cursor(row_factory=dict_row) as cursor:
        return cursor.execute(
            "SELECT job_id::text, attempt, pid FROM faults.effect WHERE job_id = %s",
            [job_id]).fetchall()


def wait_claimed(db: psycopg.Connection[Any], job_id: str, runs: int = 1,
                 timeout: float = 20.0) -> list[dict[str, Any]]:
    """The job's ``claimed`` ledger rows, once there are ``runs`` of them."""
    def started() -> list[dict[str, Any]] | None:
        rows = ledger(db, job_id)
        return rows if len(rows) >= runs else None

    return wait_until(started, timeout, f"job {job_id} to start {runs} time(s)",
                      interval=DB_POLL)


def add_claimed(pq: PortQueue, db: psycopg.Connection[Any], data: dict[str, Any],
                **options: Any) -> tuple[str, list[dict[str, Any]]]:
    """Adds a job to ``QUEUE`` and waits for a worker to claim it: the job's id
    and its ``claimed`` ledger rows."""
    job_id = pq.add_job(queue=QUEUE, data=data, **options).job_id
    assert job_id is not None
    return job_id, wait_claimed(db, job_id)


def wait_status(db: psycopg.Connection[Any], schema: str, job_id: str,
                statuses: Collection[str], timeout: float = 20.0,
                what: str | None = None) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        row = job(db, schema, job_id)
        return row if row["status"] in statuses else None

    return wait_until(reached, timeout, what or f"job {job_id} to be {'/'.join(statuses)}",
                      interval=DB_POLL)


def count_where(db: psycopg.Connection[Any], schema: str, job_ids: Sequence[str],
                status: str) -> int:
    query = sql.SQL("SELECT count(*) FROM {} WHERE id = ANY(%s::uuid[]) AND status = %s").format(
        sql.Identifier(schema, "job"))
    row = db.execute(query, [list(job_ids), status]).fetchone()
    assert row is not None
    return int(row[0])


# --- the check every scenario ends with ---


@dataclass
class Figures:
    """What a scenario did, for its closing report."""

    jobs: int
    statuses: dict[str, int]
    executions: int        # handler starts seen by the ledger ("claimed" rows)
    duplicates: int        # executions beyond the first, per job (re-runs)
    effects: int
    lost: int = 0

    def line(self, name: str, **extra: Any) -> str:
        more = " ".join(f"{key}={value}" for key, value in extra.items())
        return (f"[faults] {name}: jobs={self.jobs} statuses={self.statuses} "
                f"executions={self.executions} duplicates={self.duplicates} "
                f"effects={self.effects} lost={self.lost} {more}").rstrip()


def assert_nothing_lost(
    db: psycopg.Connection[Any], schema: str, job_ids: Sequence[str], *,
    faulted: Collection[str] = (), faulted_pids: Collection[int] = (),
) -> Figures:
    """Every job exists once; each is terminal, pending, or active with a live
    lease; ``attempt <= max_attempts``; ``finished_at`` is set exactly when
    terminal; a side effect exists iff the job completed, at most once, and it
    was written by the attempt whose output the row holds; a job ran more than
    once only if the test faulted it (it is in ``faulted``, or a process in
    ``faulted_pids`` ran it)."""
    assert len(set(job_ids)) == len(job_ids), "the test passed a job id twice"
    query = sql.SQL("""
        SELECT j.id::text AS id, j.status::text AS status, j.attempt, j.max_attempts,
               j.finished_at IS NOT NULL AS finished,
               coalesce(j.lease_expires_at > now(), false) AS lease_live, j.output,
               coalesce(e.effects, 0) AS effects, e.attempts AS effect_attempts,
               e.pids AS effect_pids,
               coalesce(l.claims, 0) AS claims, coalesce(l.pids, '{{}}') AS claim_pids
        FROM {job} AS j
        LEFT JOIN (SELECT job_id, count(*) AS effects, array_agg(attempt) AS attempts,
                          array_agg(pid) AS pids
                   FROM faults.effect GROUP BY job_id) AS e ON e.job_id = j.id
        LEFT JOIN (SELECT job_id, count(*) AS claims, array_agg(pid) AS pids
                   FROM faults.ledger WHERE event = 'claimed' GROUP BY job_id) AS l
               ON l.job_id = j.id
        WHERE j.id = ANY(%s::uuid[])
    """).format(job=sql.Identifier(schema, "job"))
    with db.cursor(row_factory=dict_row) as cursor:
        rows = cursor.execute(query, [list(job_ids)]).fetchall()
        orphans = cursor.execute(sql.SQL(
            "SELECT count(*) AS n FROM faults.effect AS e WHERE NOT EXISTS "
            "(SELECT FROM {} AS j WHERE j.id = e.job_id)").format(
                sql.Identifier(schema, "job"))).fetchone()
    problems: list[str] = []
    found = {row["id"] for row in rows}
    lost = [job_id for job_id in job_ids if job_id not in found]
    problems += [f"{job_id}: missing from the job table" for job_id in lost]
    if orphans and orphans["n"]:
        problems.append(f"{orphans['n']} side effect(s) of jobs that do not exist")
    faulted_pids = set(faulted_pids)
    for row in rows:
        where = f"{row['id']} ({row['status']}, attempt {row['attempt']}/{row['max_attempts']})"
        status = row["status"]
        if status == "active" and not row["lease_live"]:
            problems.append(f"{where}: active with a lapsed lease")
        if row["attempt"] > row["max_attempts"]:
            problems.append(f"{where}: attempt beyond max_attempts")
        if row["finished"] != (status in TERMINAL):
            problems.append(f"{where}: finished_at {'set' if row['finished'] else 'unset'}")
        expected_effects = 1 if status == "completed" else 0
        if row["effects"] != expected_effects:
            problems.append(f"{where}: {row['effects']} side effect(s), expected "
                            f"{expected_effects}")
        elif status == "completed":
            output = row["output"] or {}
            if (output.get("pid"), output.get("attempt")) != (
                    row["effect_pids"][0], row["effect_attempts"][0]):
                problems.append(f"{where}: output {output} is not from the attempt that "
                                f"wrote the effect (pid {row['effect_pids'][0]}, attempt "
                                f"{row['effect_attempts'][0]})")
        deliberately = row["id"] in faulted or bool(faulted_pids & set(row["claim_pids"]))
        if row["claims"] > 1 and not deliberately:
            problems.append(f"{where}: ran {row['claims']} times, but was not faulted")
    assert not problems, "nothing lost? no:\n  " + "\n  ".join(problems[:50])
    return Figures(
        jobs=len(rows),
        statuses=dict(sorted(Counter(row["status"] for row in rows).items())),
        executions=sum(row["claims"] for row in rows),
        duplicates=sum(max(row["claims"] - 1, 0) for row in rows),
        effects=sum(row["effects"] for row in rows),
        lost=len(lost),
    )



# --- an in-process handler, for workers a test runs in its own process ---


def ledger_handler(ledger_dsn: str) -> Callable[[Job], dict[str, Any]]:
    """A handler doing what ``app.py``'s does for a plain job (``{"sleep": S}``
    honoured), for a worker started in the test process: a ``claimed`` ledger
    row on a connection of its own to ``ledger_dsn`` (never the job's, never
    through a proxy under test), the effect through ``job.transaction()``,
    then ``returning``; returns ``{"pid", "attempt"}``."""
    def record(job: Job, event: str) -> None:
        with psycopg.connect(ledger_dsn, autocommit=True,
                             application_name="faults:ledger") as conn:
            conn.execute("INSERT INTO faults.ledger (job_id, attempt, pid, event) "
                         "VALUES (%s, %s, %s, %s)", (job.id, job.attempt, os.getpid(), event))

    def handle(job: Job) -> dict[str, Any]:
        record(job, "claimed")
        data = job.data if isinstance(job.data, dict) else {}
        if data.get("sleep"):
            time.sleep(float(data["sleep"]))
        with job.transaction() as conn:
            conn.execute("INSERT INTO faults.effect (job_id, attempt, pid) VALUES (%s, %s, %s)",
                         (job.id, job.attempt, os.getpid()))
        record(job, "returning")
        return {"pid": os.getpid(), "attempt": job.attempt}

    return handle


def link_in_use(proxy: Proxy, db: psycopg.Connection[Any], role: str) -> bool:
    """A forwarding proxy link of ``role`` whose session has run a statement
    (its connect is over: black-holing a connect is another fault)."""
    ports = [link.server.getsockname()[1] for link in proxy.open_links(role)
             if link.forwarding and link.server is not None]
    row = db.execute("SELECT count(*) FROM pg_stat_activity WHERE client_port = ANY(%s) "
                     "AND query <> ''", [ports]).fetchone()
    return row is not None and row[0] > 0
