#!/usr/bin/env python3
"""portqueue's side-by-side benchmark: one command, see bench/README.md.

    python bench/run.py --runs 3
    python bench/run.py --quick
    python bench/run.py --scenarios drain,latency --systems portqueue,pgqueuer

The first run creates bench/.venv (peers from PyPI, portqueue editable) and
re-executes itself there. Each measured process (worker or producer) is a
subprocess of its own (bench/child.py); this process sets up databases,
pre-adds jobs, watches progress and prints the tables.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
VENV = BENCH / ".venv"
VENV_PYTHON = VENV / "bin" / "python"
REQUIREMENTS = BENCH / "requirements.txt"


def ensure_venv() -> None:
    """Create or refresh bench/.venv, then run this script inside it."""
    stamp = VENV / ".bench-installed"
    wanted = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    if not (VENV_PYTHON.exists() and stamp.exists() and stamp.read_text() == wanted):
        print(f"bench: installing the bench virtualenv in {VENV} …", flush=True)
        if not VENV_PYTHON.exists():
            venv.create(VENV, with_pip=True)
        pip = [str(VENV_PYTHON), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        subprocess.run([*pip, "-r", str(REQUIREMENTS)], check=True)
        subprocess.run([*pip, "-e", str(REPO)], check=True)
        stamp.write_text(wanted)
    if Path(sys.prefix).resolve() != VENV.resolve():
        os.execv(str(VENV_PYTHON), [str(VENV_PYTHON), str(Path(__file__).resolve()),
                                    *sys.argv[1:]])


if __name__ == "__main__":
    ensure_venv()

# --- everything below runs inside bench/.venv --------------------------------------------

import argparse  # noqa: E402
import asyncio  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import queue  # noqa: E402
import signal  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from importlib import metadata  # noqa: E402
from typing import Any  # noqa: E402
from urllib.parse import quote  # noqa: E402

import psycopg  # noqa: E402
from psycopg.conninfo import conninfo_to_dict  # noqa: E402

sys.path.insert(0, str(BENCH))
import systems  # noqa: E402

CHILD = BENCH / "child.py"
SCENARIOS = ["enqueue_single", "enqueue_bulk", "drain", "latency", "drain_big_table",
             "multi_process", "multi_queue", "soak"]
# issue 23's scenarios (README: "Scenarios of issue 23"); sizes in FULL/QUICK and flags
SCENARIOS += ["drain_payload", "delayed_priority", "many_queues", "cached_plan"]

FULL = {
    "enqueue_single": 5_000, "enqueue_bulk": 50_000, "bulk_batch": 1_000, "drain": 20_000,
    "latency": 500, "latency_rate": 100.0, "big_finished": 1_000_000, "big_delayed": 100_000,
    "multi_processes": 4, "multi_queue": 1_000, "soak": 200_000,
    "payload_jobs": 2_000, "delayed": 100_000, "delayed_drain": 5_000,
    "many_queues_jobs": 300, "many_queues_rate": 20.0, "claim_rows": 10_000,
    "claim_queues": 1_000,
}
QUICK = {
    "enqueue_single": 500, "enqueue_bulk": 5_000, "bulk_batch": 1_000, "drain": 2_000,
    "latency": 100, "latency_rate": 100.0, "big_finished": 50_000, "big_delayed": 5_000,
    "multi_processes": 4, "multi_queue": 200, "soak": 10_000,
    "payload_jobs": 500, "delayed": 10_000, "delayed_drain": 1_000,
    "many_queues_jobs": 100, "many_queues_rate": 20.0, "claim_rows": 10_000,
    "claim_queues": 1_000,
}

# (scenario, metric, unit, higher_is_better)
METRICS = [
    ("enqueue_single", "rate", "jobs/s", True),
    ("enqueue_bulk", "rate", "jobs/s", True),
    ("drain", "rate", "jobs/s", True),
    ("latency", "p50_ms", "ms", False),
    ("latency", "p95_ms", "ms", False),
    ("latency", "p99_ms", "ms", False),
    ("drain_big_table", "rate", "jobs/s", True),
    ("multi_process", "rate", "jobs/s", True),
    ("multi_queue", "rate", "jobs/s", True),
    ("multi_queue", "single_rate", "jobs/s", True),
    ("multi_queue", "ratio", "x", True),
    ("soak", "rate", "jobs/s", True),
    ("soak", "rss_start_mb", "MB", False),
    ("soak", "rss_end_mb", "MB", False),
    ("soak", "rss_growth_pct", "%", False),
]
PAYLOAD_KB = [1, 10, 100]
METRICS += [("drain_payload", "rate_tiny", "jobs/s", True)]
METRICS += [("drain_payload", f"rate_{kb}kb", "jobs/s", True) for kb in PAYLOAD_KB]
METRICS += [("drain_payload", f"ratio_{kb}kb", "x", True) for kb in PAYLOAD_KB]
METRICS += [("delayed_priority", metric, unit, True)
            for metric, unit in (("rate", "jobs/s"), ("base_rate", "jobs/s"), ("ratio", "x"))]
QUEUE_COUNTS = [1, 100, 1000]
METRICS += [("many_queues", f"p50_ms_{k}q", "ms", False) for k in QUEUE_COUNTS]
METRICS += [("many_queues", f"db_ms_per_s_{k}q", "ms/s", False) for k in QUEUE_COUNTS]
METRICS += [("cached_plan", f"{prefix}{metric}", unit, False) for prefix in ("", "plain_")
            for metric, unit in (("fresh_ms", "ms"), ("cached_ms", "ms"), ("ratio", "x"))]

DRAIN_TIMEOUT_SECONDS = 1800
MULTI_QUEUE_CONCURRENCY = 20
MULTI_QUEUE_HANDLER_MS = 5


class BenchError(RuntimeError):
    pass


# --------------------------------------------------------------------------- processes


class Child:
    """A bench/child.py subprocess whose "@" lines arrive on a shared queue."""

    def __init__(self, args: list[str], events: queue.Queue[tuple[Child, dict[str, Any]]],
                 label: str) -> None:
        self.label = label
        self.log = tempfile.NamedTemporaryFile(  # noqa: SIM115
            prefix=f"bench-{label}-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(
            [*systems.child_command(args[1], sys.executable, CHILD), *args],
            stdout=subprocess.PIPE, stderr=self.log, text=True, cwd=str(BENCH))
        self.events = events
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("@"):
                self.events.put((self, json.loads(line[1:])))

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise BenchError(f"{self.label} exited with {self.proc.returncode}:\n"
                             + self.stderr_tail())

    def stderr_tail(self, lines: int = 30) -> str:
        self.log.flush()
        text = Path(self.log.name).read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                print(f"  ! {self.label} did not stop in {timeout:.0f}s: killed", flush=True)
                self.proc.kill()
                self.proc.wait()
        self.reader.join(5)
        self.log.close()
        os.unlink(self.log.name)


def wait_event(events: queue.Queue[tuple[Child, dict[str, Any]]], kind: str,
               children: list[Child], timeout: float) -> tuple[Child, dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            child, event = events.get(timeout=0.1)
        except queue.Empty:
            for child in children:
                child.check_alive()
            continue
        if event["ev"] == kind:
            return child, event
    raise BenchError(f"no {kind!r} event within {timeout:.0f}s")


# --------------------------------------------------------------------------- databases


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.base_dsn = args.dsn
        self.sizes = QUICK if args.quick else FULL
        self.settings = {name: dict(values) for name, values in systems.DEFAULTS.items()}
        for assignment in args.set or []:
            key, _, value = assignment.partition("=")
            system, _, option = key.partition(".")
            parsed = json.loads(value) if value[:1].isdigit() or \
                value in ("true", "false") else value
            self.settings.setdefault(system, {})[option] = parsed

    def drop_databases(self, chosen: list[str]) -> None:
        with psycopg.connect(self.base_dsn, autocommit=True) as conn:
            for system in chosen:
                conn.execute(f'DROP DATABASE IF EXISTS "{systems.database(system)}" WITH (FORCE)')

    def dsn(self, system: str) -> str:
        # a URL: asyncpg (PgQueuer's driver) takes no key=value strings
        params = conninfo_to_dict(self.base_dsn)
        user = quote(str(params.get("user", "postgres")), safe="")
        password = params.get("password")
        auth = user + (":" + quote(str(password), safe="") if password else "")
        host = params.get("host", "127.0.0.1")
        port = params.get("port", 5432)
        return f"postgresql://{auth}@{host}:{port}/{systems.database(system)}"

    def fresh_database(self, system: str) -> str:
        name = systems.database(system)
        with psycopg.connect(self.base_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
        dsn = self.dsn(system)
        systems.get(system).setup(dsn)
        return dsn

    def child_args(self, role: str, system: str, dsn: str, *extra: str,
                   settings: dict[str, Any] | None = None) -> list[str]:
        chosen = self.settings[system] if settings is None else settings
        return [role, system, dsn, "--settings", json.dumps(chosen), *extra]

    # --- helpers shared by scenarios ---

    def preadd(self, system: str, dsn: str, n: int) -> None:
        async def add() -> None:
            producer = await systems.get(system).producer(dsn, self.settings[system])
            try:
                for start in range(0, n, 1000):
                    await producer.add_many(
                        [self.payload(i) for i in range(start, min(start + 1000, n))])
            finally:
                await producer.close()

        asyncio.run(add())
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("ANALYZE")

    def load_background(self, system: str, dsn: str) -> float:
        start = time.perf_counter()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SET session_replication_role = replica")  # no triggers, no FK checks
            with conn.transaction():
                systems.get(system).load_background(
                    conn, self.sizes["big_finished"], self.sizes["big_delayed"])
            conn.execute("RESET session_replication_role")
            conn.execute("VACUUM (ANALYZE)")
            # The load writes about a gigabyte of WAL: without this, the checkpoint
            # it calls for would land in whichever drain came next.
            conn.execute("CHECKPOINT")
        return time.perf_counter() - start

    def drain(self, system: str, n: int, processes: int = 1, big_table: bool = False,
              soak: bool = False, settings: dict[str, Any] | None = None,
              delayed: int = 0) -> dict[str, Any]:
        """Pre-add n jobs, start the workers, and time from the first handler call
        (any process) to the moment the database shows every job finished."""
        dsn = self.fresh_database(system)
        result: dict[str, Any] = {"n": n, "processes": processes}
        if big_table:
            result["load_s"] = round(self.load_background(system, dsn), 1)
        if delayed:
            result["load_s"] = round(self.load_delayed(system, dsn, delayed), 1)
        self.preadd(system, dsn, n)
        sys_obj = systems.get(system)
        with psycopg.connect(dsn, autocommit=True) as conn:
            first_id = conn.execute(sys_obj.first_id_sql).fetchone()[0]
        report_every = 1000 if soak else 200
        events: queue.Queue[tuple[Child, dict[str, Any]]] = queue.Queue()
        children = [Child(self.child_args("worker", system, dsn,
                                          "--report-every", str(report_every),
                                          settings=settings),
                          events, f"{system}-worker{i}") for i in range(processes)]
        try:
            counts = {id(c): 0 for c in children}
            firsts: list[float] = []
            rss_samples: list[tuple[int, int]] = []
            # Handlers report every report_every jobs; once all but the last
            # reports are in, poll the database for the last commits.
            threshold = n - processes * report_every
            deadline = time.monotonic() + DRAIN_TIMEOUT_SECONDS
            while sum(counts.values()) < threshold:
                if time.monotonic() > deadline:
                    raise BenchError(f"{system}: drain timed out at {sum(counts.values())}/{n}")
                try:
                    child, event = events.get(timeout=0.2)
                except queue.Empty:
                    for c in children:
                        c.check_alive()
                    continue
                if event["ev"] == "first":
                    firsts.append(event["ts"])
                elif event["ev"] == "progress":
                    counts[id(child)] = event["n"]
                    if soak:
                        rss_samples.append((event["n"], event["rss"]))
            with psycopg.connect(dsn, autocommit=True) as conn:
                while conn.execute(sys_obj.remaining_sql, (first_id,)).fetchone()[0] > 0:
                    if time.monotonic() > deadline:
                        raise BenchError(f"{system}: last jobs never finished")
                    for c in children:
                        c.check_alive()
                    time.sleep(0.01)
                end = time.time()
            while not events.empty():  # a 'first' can only be late when n is tiny
                child, event = events.get()
                if event["ev"] == "first":
                    firsts.append(event["ts"])
                elif event["ev"] == "progress" and soak:
                    rss_samples.append((event["n"], event["rss"]))
            seconds = end - min(firsts)
            result.update(seconds=round(seconds, 3), rate=round(n / seconds, 1))
            if soak:
                rss_samples.sort()
                # "start" is after the first 5 % of jobs: connections, prepared
                # statements and caches are warm by then; "end" is the last report.
                warm = next((rss for count, rss in rss_samples if count >= n * 0.05),
                            rss_samples[0][1])
                result.update(
                    rss_start_mb=round(warm / 2**20, 1),
                    rss_end_mb=round(rss_samples[-1][1] / 2**20, 1),
                    rss_growth_pct=round(100 * (rss_samples[-1][1] - warm) / warm, 1),
                    rss_series_mb=[round(rss / 2**20, 1) for _, rss in
                                   rss_samples[:: max(1, len(rss_samples) // 20)]],
                )
            return result
        finally:
            for c in children:
                c.stop()

    # --- scenarios ---

    def multi_queue(self, system: str) -> dict[str, Any]:
        """The same drain by a worker of that queue only and by a worker that also
        consumes two empty queues, one after the other (the order alternates
        between runs); the ratio is three queues / one queue. Concurrency 20 per
        queue (issue 22's figures), and handlers that wait on I/O for 5 ms: a
        no-op one frees its slot before the worker's next claim returns, which
        hides a lost wake-up."""
        n = self.sizes["multi_queue"]
        one = {**self.settings[system], "concurrency": MULTI_QUEUE_CONCURRENCY,
               "handler_io_ms": MULTI_QUEUE_HANDLER_MS}
        three = {**one, "extra_queues": 2}
        self.multi_queue_runs = getattr(self, "multi_queue_runs", 0) + 1
        order = [one, three] if self.multi_queue_runs % 2 else [three, one]
        rates = {}
        for settings in order:
            rates["multi" if settings is three else "single"] = self.drain(
                system, n, settings=settings)["rate"]
        return {"n": n, "rate": rates["multi"], "single_rate": rates["single"],
                "ratio": round(rates["multi"] / rates["single"], 3)}

    def enqueue(self, system: str, mode: str) -> dict[str, Any]:
        dsn = self.fresh_database(system)
        n = self.sizes["enqueue_single" if mode == "single" else "enqueue_bulk"]
        events: queue.Queue[tuple[Child, dict[str, Any]]] = queue.Queue()
        child = Child(self.child_args("produce", system, dsn, "--mode", mode, "--n", str(n),
                                      "--batch", str(self.sizes["bulk_batch"])),
                      events, f"{system}-producer")
        try:
            _, event = wait_event(events, "result", [child], 600)
        finally:
            child.stop()
        return {"n": n, "seconds": round(event["seconds"], 3),
                "rate": round(n / event["seconds"], 1)}

    def latency(self, system: str, settings: dict[str, Any] | None = None,
                n: int | None = None, rate: float | None = None,
                backend_cpu: bool = False) -> dict[str, Any]:
        """An idle worker; jobs added at a steady rate by another process; the
        delay from each add's commit (producer clock) to its handler's start.
        backend_cpu: also the worker's backends' CPU per second (many_queues)."""
        dsn = self.fresh_database(system)
        n = self.sizes["latency"] if n is None else n
        rate = self.sizes["latency_rate"] if rate is None else rate
        events: queue.Queue[tuple[Child, dict[str, Any]]] = queue.Queue()
        worker = Child(self.child_args("worker", system, dsn, "--per-job",
                                       "--report-every", str(10**9), settings=settings),
                       events, f"{system}-worker")
        producer: Child | None = None
        try:
            wait_event(events, "ready", [worker], 60)
            warm = asyncio.run(self._warm_up(system, dsn, events, worker))
            cpu_before = (time.monotonic(), backends_cpu_ns(self.base_dsn, dsn)) \
                if backend_cpu else None
            # backend_cpu: the producer's sessions are named, to leave them out
            producer_dsn = dsn + "?application_name=bench-producer" if backend_cpu else dsn
            producer = Child(self.child_args("produce", system, producer_dsn, "--mode", "paced",
                                             "--n", str(n), "--rate", str(rate)),
                             events, f"{system}-producer")
            started: dict[int, float] = {}
            sent: list[tuple[float, float]] | None = None
            deadline = None
            while len(started) < n:
                if deadline is None and sent is not None:
                    deadline = time.monotonic() + 10
                if deadline is not None and time.monotonic() > deadline:
                    break
                try:
                    _, event = events.get(timeout=0.2)
                except queue.Empty:
                    worker.check_alive()
                    if sent is None:
                        producer.check_alive()
                    continue
                if event["ev"] == "job" and event["seq"] is not None and event["seq"] >= 0:
                    started.setdefault(event["seq"], event["ts"])
                elif event["ev"] == "result":
                    sent = event["sent"]
            if sent is None:
                _, event = wait_event(events, "result", [producer], 60)
                sent = event["sent"]
            if cpu_before is not None:
                cpu_after = (time.monotonic(), backends_cpu_ns(self.base_dsn, dsn))
        finally:
            if producer is not None:
                producer.stop()
            worker.stop()
        from_commit = sorted(1000 * (started[i] - sent[i][1]) for i in started)
        from_payload = sorted(1000 * (started[i] - sent[i][0]) for i in started)
        result = {
            "n": n, "rate": rate, "missing": n - len(started), "warm_up_ms": warm,
            "p50_ms": pct(from_commit, 50), "p95_ms": pct(from_commit, 95),
            "p99_ms": pct(from_commit, 99), "max_ms": round(from_commit[-1], 2),
            "payload_p50_ms": pct(from_payload, 50), "payload_p99_ms": pct(from_payload, 99),
        }
        if cpu_before is not None:
            result["db_ms_per_s"] = cpu_per_second(cpu_before, cpu_after)
        return result

    async def _warm_up(self, system: str, dsn: str,
                       events: queue.Queue[tuple[Child, dict[str, Any]]],
                       worker: Child) -> list[float]:
        """Three jobs through the idle worker, so it is listening and warm."""
        producer = await systems.get(system).producer(dsn, self.settings[system])
        took = []
        try:
            for i in range(3):
                # A bare NOTIFY sent before the worker's LISTEN is lost: send
                # again until one arrives (a queue just gets a spare job).
                for _attempt in range(10):
                    start = time.time()
                    await producer.add_one({"seq": -1 - i, "t": start})
                    seen = await asyncio.to_thread(self._wait_job, events, worker, -1 - i, 3.0)
                    if seen is not None:
                        break
                else:
                    raise BenchError(f"{system}: the worker never ran a warm-up job")
                took.append(round(1000 * (seen - start), 2))
                await asyncio.sleep(0.3)
        finally:
            await producer.close()
        return took

    @staticmethod
    def _wait_job(events: queue.Queue[tuple[Child, dict[str, Any]]], worker: Child, seq: int,
                  timeout: float) -> float | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                _, event = events.get(timeout=0.1)
            except queue.Empty:
                worker.check_alive()
                continue
            if event["ev"] == "job" and event["seq"] == seq:
                return float(event["ts"])
        return None

    # --- issue 23's scenarios ---

    def payload(self, seq: int) -> dict[str, Any]:
        """A pre-added job's payload: {"seq": n}, padded to payload_bytes (drain_payload)."""
        size = getattr(self, "payload_bytes", 0)
        return {"seq": seq, "pad": "x" * size} if size else {"seq": seq}

    def drain_payload(self, system: str) -> dict[str, Any]:
        """The same drain with tiny payloads and with payloads of each --payload-kb size,
        one after the other; ratio_<k>kb is rate_<k>kb / rate_tiny."""
        n = self.sizes["payload_jobs"]
        result: dict[str, Any] = {"n": n}
        try:
            for kb in [0, *self.payload_kb]:
                self.payload_bytes = kb * 1024
                rate = self.drain(system, n)["rate"]
                result["rate_tiny" if kb == 0 else f"rate_{kb}kb"] = rate
        finally:
            self.payload_bytes = 0
        for kb in self.payload_kb:
            result[f"ratio_{kb}kb"] = round(result[f"rate_{kb}kb"] / result["rate_tiny"], 3)
        return result

    def load_delayed(self, system: str, dsn: str, n: int) -> float:
        start = time.perf_counter()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SET session_replication_role = replica")  # as load_background
            with conn.transaction():
                systems.DELAYED_LOADERS[system](conn, n)
            conn.execute("RESET session_replication_role")
            conn.execute("VACUUM (ANALYZE)")
            conn.execute("CHECKPOINT")
        return time.perf_counter() - start

    def delayed_priority(self, system: str) -> dict[str, Any]:
        """A drain of delayed_drain ready jobs with --delayed-jobs jobs due in a day at a
        higher priority loaded first, and the same drain without them (the order
        alternates between runs); ratio = with / without."""
        n, delayed = self.sizes["delayed_drain"], self.sizes["delayed"]
        self.delayed_runs = getattr(self, "delayed_runs", 0) + 1
        order = [delayed, 0] if self.delayed_runs % 2 else [0, delayed]
        rates = {count: self.drain(system, n, delayed=count)["rate"] for count in order}
        return {"n": n, "delayed": delayed, "rate": rates[delayed], "base_rate": rates[0],
                "ratio": round(rates[delayed] / rates[0], 3)}

    def many_queues(self, system: str) -> dict[str, Any]:
        """One worker of N queues (concurrency 1 each; all but one never get a job) under
        a light steady load on the one: start latency p50 and the database CPU of the
        worker's connections per second, for each of --queue-counts."""
        result: dict[str, Any] = {"n": self.sizes["many_queues_jobs"],
                                  "rate": self.sizes["many_queues_rate"]}
        for count in self.queue_counts:
            settings = {**self.settings[system], "concurrency": 1, "extra_queues": count - 1}
            one = self.latency(system, settings=settings, n=self.sizes["many_queues_jobs"],
                               rate=self.sizes["many_queues_rate"], backend_cpu=True)
            result[f"p50_ms_{count}q"] = one["p50_ms"]
            result[f"p99_ms_{count}q"] = one["p99_ms"]
            result[f"missing_{count}q"] = one["missing"]
            result[f"db_ms_per_s_{count}q"] = one["db_ms_per_s"]
        return result

    def cached_plan(self, system: str) -> dict[str, Any]:
        """portqueue's own claim statement (sql/worker.sql "claim", as the worker sends it)
        for claim_rows rows over claim_queues queues (claim_rows / claim_queues slots
        each, every queue with twice that many ready jobs), on a fresh (custom) plan and
        on a cached generic one (a prepared statement under plan_cache_mode =
        force_generic_plan, which the plan cache picks by itself after five runs when
        the generic plan's estimate is no worse). Each claim is rolled back; median of
        claim_repeats, alternating. The same for claim_plain (plain_*), the statement
        the worker claims with while no pending job names a pattern or has a key."""
        import uuid

        from portqueue import PortQueue
        from portqueue.queries import queries_for

        dsn = self.fresh_database(system)
        rows, queues = self.sizes["claim_rows"], self.sizes["claim_queues"]
        slots = max(1, rows // queues)
        names = [f"{systems.QUEUE}-{i}" for i in range(queues)]
        with PortQueue(dsn) as client:
            for name in names:
                client.add_jobs(queue=name, jobs=[{"data": {"seq": i}} for i in range(2 * slots)])
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("ANALYZE")
        worker_id = uuid.uuid4()
        q = queries_for("portqueue")
        statements = {
            "": q("claim", queues=names, slots=[slots] * queues, lease_seconds=[60] * queues,
                  refused_patterns=[], matching_patterns=[], worker_id=worker_id),
            "plain_": q("claim_plain", queues=names, slots=[slots] * queues,
                        lease_seconds=[60] * queues, worker_id=worker_id)}
        result: dict[str, Any] = {"queues": queues, "slots": slots}
        with psycopg.connect(dsn) as conn:
            conn.execute("SET plan_cache_mode = force_generic_plan")
            conn.commit()
            for prefix, query in statements.items():
                timings: dict[str, list[float]] = {"fresh": [], "cached": []}
                for _ in range(self.sizes.get("claim_repeats", 3)):
                    for kind in ("fresh", "cached"):
                        start = time.perf_counter()
                        # prepare=False: an unnamed statement, planned for these values
                        claimed = len(conn.execute(query.sql, query.params,
                                                   prepare=kind == "cached").fetchall())
                        timings[kind].append(1000 * (time.perf_counter() - start))
                        conn.rollback()
                fresh = statistics.median(timings["fresh"])
                cached = statistics.median(timings["cached"])
                result.update({f"{prefix}rows": claimed, f"{prefix}fresh_ms": round(fresh, 1),
                               f"{prefix}cached_ms": round(cached, 1),
                               f"{prefix}ratio": round(cached / fresh, 2)})
        return result

    def run_one(self, scenario: str, system: str) -> dict[str, Any]:
        if scenario == "enqueue_single":
            return self.enqueue(system, "single")
        if scenario == "enqueue_bulk":
            return self.enqueue(system, "bulk")
        if scenario == "drain":
            return self.drain(system, self.sizes["drain"])
        if scenario == "latency":
            return self.latency(system)
        if scenario == "drain_big_table":
            return self.drain(system, self.sizes["drain"], big_table=True)
        if scenario == "multi_process":
            return self.drain(system, self.sizes["drain"],
                              processes=self.sizes["multi_processes"])
        if scenario == "multi_queue":
            return self.multi_queue(system)
        if scenario == "soak":
            return self.drain(system, self.sizes["soak"], soak=True)
        if scenario == "drain_payload":
            return self.drain_payload(system)
        if scenario == "delayed_priority":
            return self.delayed_priority(system)
        if scenario == "many_queues":
            return self.many_queues(system)
        if scenario == "cached_plan":
            return self.cached_plan(system)
        raise ValueError(scenario)


    def run_one_retrying(self, scenario: str, system: str) -> dict[str, Any]:
        # The server is shared (max_connections): a connection refused for
        # lack of slots is someone else's load, not a result; try again.
        for attempt in range(3):
            try:
                return self.run_one(scenario, system)
            except Exception as exc:
                if "too many clients" not in str(exc) or attempt == 2:
                    raise
                print("(server full, retrying in 10s)", end=" ", flush=True)
                time.sleep(10)
        raise AssertionError("unreachable")


def backends_cpu_ns(admin_dsn: str, dsn: str) -> dict[int, int] | None:
    """CPU used so far by each backend of dsn's database except the bench's own producers
    (application_name bench-producer) and this connection, from /proc/<pid>/schedstat:
    the server runs on this machine. None when /proc cannot be read."""
    database = conninfo_to_dict(dsn)["dbname"]
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        pids = [pid for (pid,) in conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()"
            " AND coalesce(application_name, '') <> 'bench-producer'", (database,))]
    found: dict[int, int] = {}
    for pid in pids:
        try:
            found[pid] = int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue
        except PermissionError:
            return None
    return found


def cpu_per_second(before: tuple[float, dict[int, int] | None],
                   after: tuple[float, dict[int, int] | None]) -> float:
    """Milliseconds of backend CPU per second of wall time between two samples; a backend
    that appeared in between counts whole."""
    if before[1] is None or after[1] is None:
        return float("nan")
    used = sum(ns - before[1].get(pid, 0) for pid, ns in after[1].items())
    return round(used / 1e6 / (after[0] - before[0]), 2)


def pct(sorted_values: list[float], p: float) -> float:
    if not sorted_values:
        return float("nan")
    k = (len(sorted_values) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(sorted_values) - 1)
    return round(sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (k - lo), 2)


NODE_DIR = BENCH / "node"


def ensure_node_peers() -> None:
    """Install the Node peers (bench/node/package-lock.json, pinned) into the git-ignored
    bench/node/node_modules with `npm ci`, again whenever the lock file changes."""
    stamp = NODE_DIR / "node_modules" / ".bench-installed"
    wanted = hashlib.sha256((NODE_DIR / "package-lock.json").read_bytes()).hexdigest()
    if stamp.exists() and stamp.read_text() == wanted:
        return
    print(f"bench: installing the Node peers in {NODE_DIR / 'node_modules'} …", flush=True)
    subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                   cwd=str(NODE_DIR), check=True)
    stamp.write_text(wanted)


# --------------------------------------------------------------------------- reporting


def systems_for(scenario: str, chosen: list[str]) -> list[str]:
    names = list(chosen)
    if scenario == "multi_queue":  # a portqueue worker's wake-ups, not a comparison
        return [name for name in chosen if name == "portqueue"]
    if scenario == "drain_big_table":  # no background loader for the Node peers yet
        names = [name for name in names if name not in systems.NODE_SYSTEMS]
    if scenario in ("many_queues", "cached_plan"):  # portqueue's claim, not a comparison
        return [name for name in chosen if name == "portqueue"]
    if scenario == "delayed_priority":
        return [name for name in chosen if name in systems.DELAYED_LOADERS]
    if scenario == "latency" and "rawsql" in chosen:
        names.append("listen_notify")
    return names


def fmt(value: float) -> str:
    if value != value:  # NaN
        return "n/a"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def spread(values: list[float]) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return fmt(values[0])
    return f"{fmt(statistics.median(values))} ({fmt(min(values))}-{fmt(max(values))})"


def table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def line(row: list[str]) -> str:
        return "| " + " | ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)) + " |"

    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|",
                      *map(line, rows)])


def report(results: dict[str, dict[str, list[dict[str, Any]]]], chosen: list[str]) -> str:
    variants = sorted({s for by_system in results.values() for s in by_system
                       if systems.is_variant(s)})
    all_systems = [s for s in [*systems.SYSTEMS, *variants, "listen_notify"]
                   if any(s in by_system for by_system in results.values())]
    out = ["Medians over runs (min-max):", ""]
    rows = []
    for scenario, metric, unit, higher in METRICS:
        if scenario not in results:
            continue
        row = [f"{scenario} {metric} ({unit}, {'higher' if higher else 'lower'} is better)"]
        for system in all_systems:
            runs = results[scenario].get(system, [])
            row.append(spread([r[metric] for r in runs if metric in r]))
        rows.append(row)
    out.append(table(["scenario / metric", *all_systems], rows))

    others = [s for s in all_systems if s != "portqueue"]
    if "portqueue" in all_systems and others:
        out += ["", "Ratios portqueue / other, per run, median (min-max); "
                "for rates > 1 means portqueue is faster, for ms and MB < 1 means better:", ""]
        rows = []
        for scenario, metric, _unit, _higher in METRICS:
            if scenario not in results or metric == "rss_growth_pct":
                continue
            mine = results[scenario].get("portqueue", [])
            row = [f"{scenario} {metric}"]
            for other in others:
                theirs = results[scenario].get(other, [])
                ratios = [a[metric] / b[metric] for a, b in zip(mine, theirs, strict=False)
                          if metric in a and metric in b and b[metric]]
                row.append(spread(ratios))
            rows.append(row)
        out.append(table(["scenario / metric", *[f"pq / {o}" for o in others]], rows))

    out += best_peer_table(results, all_systems)

    derived = []
    for system in all_systems:
        def median_rate(scenario: str, system: str = system) -> float | None:
            runs = results.get(scenario, {}).get(system, [])
            return statistics.median(r["rate"] for r in runs) if runs else None

        drain = median_rate("drain")
        big, multi = median_rate("drain_big_table"), median_rate("multi_process")
        if drain and (big or multi):
            derived.append([system, fmt(big / drain) if big else "-",
                            fmt(multi / drain) if multi else "-"])
    if derived:
        out += ["", "Within each system (medians): big-table drain / drain, "
                "4-process drain / 1-process drain:", ""]
        out.append(table(["system", "big / empty", "4 procs / 1 proc"], derived))
    return "\n".join(out)


def best_peer_table(results: dict[str, dict[str, list[dict[str, Any]]]],
                    all_systems: list[str]) -> list[str]:
    """portqueue against the best peer of each row (by median; raw SQL and the bare
    NOTIFY are ceilings, not peers): the median of the per-run ratios, same convention
    as the ratios table (rates > 1 and ms < 1 mean portqueue is ahead)."""
    peers = [s for s in all_systems
             if s not in ("portqueue", "rawsql", "listen_notify") and not systems.is_variant(s)]
    rows = []
    for scenario, metric, _unit, higher in METRICS:
        mine = results.get(scenario, {}).get("portqueue", [])
        medians = {p: statistics.median(r[metric] for r in runs)
                   for p in peers if (runs := [r for r in results.get(scenario, {}).get(p, [])
                                               if metric in r])}
        if not mine or not medians or metric.startswith("ratio") or metric == "ratio":
            continue
        best = (max if higher else min)(medians, key=lambda p: medians[p])
        theirs = results[scenario][best]
        ratios = [a[metric] / b[metric] for a, b in zip(mine, theirs, strict=False)
                  if metric in a and metric in b and b[metric]]
        rows.append([f"{scenario} {metric}", best, fmt(medians[best]), spread(ratios)])
    if not rows:
        return []
    return ["", "portqueue / the best peer of each row (per-run ratios, median (min-max)):", "",
            table(["scenario / metric", "best peer", "its median", "pq / best"], rows)]


def versions(dsn: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for package in ["portqueue", "procrastinate", "pgqueuer", "psycopg", "psycopg-pool",
                    "asyncpg"]:
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = None
    with psycopg.connect(dsn) as conn:
        found["postgres"] = conn.execute("SHOW server_version").fetchone()[0]
        found["synchronous_commit"] = conn.execute("SHOW synchronous_commit").fetchone()[0]
    rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                         capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--",
                            "portqueue", "sql"], capture_output=True, text=True)
    found["portqueue_commit"] = rev.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    found["python"] = platform.python_version()
    found["cpus"] = os.cpu_count()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=None,
                        help="repetitions, systems interleaved (default 3; 1 with --quick)")
    parser.add_argument("--quick", action="store_true",
                        help="small sizes, one run: checks the harness in a few minutes")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS),
                        help=f"comma-separated subset of {','.join(SCENARIOS)}")
    parser.add_argument("--systems", default=",".join(systems.SYSTEMS),
                        help=f"comma-separated subset of {','.join(systems.SYSTEMS)}; "
                        "portqueue@REV: portqueue on a schema migrated only to revision "
                        "REV (A/B of a migration)")
    parser.add_argument("--dsn", default=os.environ.get(
        "BENCH_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"),
        help="a superuser connection; each system gets database bench_<system> beside it")
    parser.add_argument("--set", action="append", metavar="SYSTEM.OPTION=VALUE",
                        help="override a system's setting, e.g. pgqueuer.batch_size=10")
    parser.add_argument("--out", default=str(BENCH / "results"), help="where the JSON goes")
    parser.add_argument("--payload-kb", default=",".join(map(str, PAYLOAD_KB)),
                        help="drain_payload: payload sizes in KB (default 1,10,100)")
    parser.add_argument("--payload-jobs", type=int, help="drain_payload: jobs per drain")
    parser.add_argument("--delayed-jobs", type=int,
                        help="delayed_priority: delayed jobs loaded (issue 23: 1000000)")
    parser.add_argument("--queue-counts", default=",".join(map(str, QUEUE_COUNTS)),
                        help="many_queues: the numbers of queues (default 1,100,1000)")
    parser.add_argument("--claim-rows", type=int, help="cached_plan: rows per claim")
    parser.add_argument("--claim-queues", type=int, help="cached_plan: queues per claim")
    parser.add_argument("--keep-databases", action="store_true",
                        help="leave the bench_* databases of the last scenario for inspection")
    args = parser.parse_args()
    runs = args.runs or (1 if args.quick else 3)
    scenarios = [s for s in args.scenarios.split(",") if s]
    chosen = [s for s in args.systems.split(",") if s]
    for name in scenarios:
        if name not in SCENARIOS:
            parser.error(f"unknown scenario {name!r}")
    for name in chosen:
        if name not in systems.SYSTEMS and not systems.is_variant(name):
            parser.error(f"unknown system {name!r}")

    if any(name in systems.NODE_SYSTEMS for name in chosen):
        ensure_node_peers()
    bench = Bench(args)
    bench.payload_kb = [int(kb) for kb in args.payload_kb.split(",") if kb]
    bench.queue_counts = [int(k) for k in args.queue_counts.split(",") if k]
    METRICS.extend(("drain_payload", f"{metric}_{kb}kb", unit, True)
                   for kb in bench.payload_kb if kb not in PAYLOAD_KB
                   for metric, unit in (("rate", "jobs/s"), ("ratio", "x")))
    METRICS.extend(("many_queues", f"{metric}_{k}q", unit, False)
                   for k in bench.queue_counts if k not in QUEUE_COUNTS
                   for metric, unit in (("p50_ms", "ms"), ("db_ms_per_s", "ms/s")))
    overrides = {"payload_jobs": args.payload_jobs, "delayed": args.delayed_jobs,
                 "claim_rows": args.claim_rows, "claim_queues": args.claim_queues}
    bench.sizes = {**bench.sizes, **{k: v for k, v in overrides.items() if v is not None}}
    for name in chosen:
        if systems.is_variant(name):
            # portqueue's settings, then the variant's own --set overrides
            bench.settings[name] = {**bench.settings["portqueue"], **bench.settings.get(name, {})}
    meta = {"started": datetime.datetime.now().isoformat(timespec="seconds"),
            "quick": args.quick, "runs": runs, "sizes": bench.sizes,
            "settings": bench.settings, "versions": versions(args.dsn)}
    print(f"bench: {runs} run(s) of {', '.join(scenarios)} for {', '.join(chosen)}")
    print(f"bench: settings {json.dumps({s: bench.settings[s] for s in chosen})}", flush=True)
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    failures: list[str] = []
    timings: dict[str, float] = {}
    for run in range(runs):
        for scenario in scenarios:
            names = systems_for(scenario, chosen)
            # interleave: each run starts with a different system
            shift = run % len(names)
            for system in names[shift:] + names[:shift]:
                label = f"run {run + 1}/{runs} {scenario:<16} {system:<14}"
                print(f"{label} …", end=" ", flush=True)
                started = time.perf_counter()
                try:
                    result = bench.run_one_retrying(scenario, system)
                except Exception as exc:  # keep going: one broken peer must not hide the rest
                    failures.append(f"{label}: {exc}")
                    print(f"FAILED: {exc}", flush=True)
                    continue
                took = time.perf_counter() - started
                timings[f"{scenario}/{system}"] = timings.get(f"{scenario}/{system}", 0) + took
                results.setdefault(scenario, {}).setdefault(system, []).append(result)
                shown = {k: v for k, v in result.items()
                         if k in ("rate", "p50_ms", "p99_ms", "rss_growth_pct", "load_s",
                                  "missing", "single_rate", "ratio")}
                print(f"{shown} [{took:.0f}s]", flush=True)

    if not args.keep_databases:
        bench.drop_databases(chosen)
    text = report(results, chosen)
    print()
    print(text)
    if failures:
        print("\nFailures:\n" + "\n".join(failures))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = out / f"{stamp}{'-quick' if args.quick else ''}.json"
    meta["wall_seconds"] = {k: round(v, 1) for k, v in timings.items()}
    path.write_text(json.dumps({"meta": meta, "results": results, "failures": failures},
                               indent=1) + "\n")
    shown = path.relative_to(REPO) if path.resolve().is_relative_to(REPO) else path
    print(f"\nbench: raw numbers in {shown}")


if __name__ == "__main__":
    main()
