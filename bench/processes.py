"""Many worker processes: throughput at a fixed total concurrency, and what
idle processes cost a producer (issues 22 and 23).

    PYTHONPATH=. python bench/processes.py many [--processes 1,4,16,50] [--total 500]
                                                [--jobs 5000] [--runs 3]
    PYTHONPATH=. python bench/processes.py idle [--processes 1,50] [--rate 50]
                                                [--seconds 10] [--runs 3]
    (either with --dsn DSN to use a server of your own; it needs room for
    3 connections per process)

Both run on a PostgreSQL cluster of the bench's own by default: initdb (from
``pg_config --bindir``) in a fresh directory under /tmp, a free port,
``max_connections=250`` (``--max-connections``) and otherwise the server's
defaults (durable commits, autovacuum on). It is stopped and deleted at the end.

- ``many``: for each process count P, P worker processes (``--role worker``,
  an ``AsyncPortQueue`` worker with one no-op async handler, concurrency
  total / P each, maintenance on, scheduler off) start and register; then
  ``--jobs`` jobs are added to the queue while it is paused, the queue is
  resumed, and the time from the resume to the database showing every job
  completed (polled every 20 ms) gives jobs/s. The process counts interleave
  across runs (each run starts with another one). Also the most connections
  the workers held at once (pg_stat_activity, by application_name).
- ``idle``: P idle worker processes (concurrency 10 each); this process adds
  one job at a time (sync ``PortQueue``, one autocommit ``add_job``) at
  ``--rate`` a second for ``--seconds`` (after ``--settle`` seconds, so every
  worker has counted its peers), and times each call. p50 and p99 of the
  adds, and of commit-to-start (``started_at - created_at``, the database's
  clock); the workers run each job as it comes. Also the worker processes'
  CPU in cores (Linux), over ``--idle-window`` and while adding: the figure
  the machine's load hardly moves.

Prints one line per measurement and a summary (medians over runs, and each
count's ratio to the first), and writes the figures to
bench/results/processes-<scenario>-<time>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psycopg

from portqueue import AsyncPortQueue, PortQueue

QUEUE = "procs"
SCHEMA = "portqueue"  # the statements below name it
PREFIX = "bench-proc"
RESULTS = Path(__file__).resolve().parent / "results"
ROOT = Path(__file__).resolve().parents[1]


# --- the bench's own cluster ---


class Cluster:
    def __init__(self, max_connections: int) -> None:
        bindir = Path(subprocess.run(["pg_config", "--bindir"], check=True, text=True,
                                     capture_output=True).stdout.strip())
        self.bin = bindir
        self.root = Path(tempfile.mkdtemp(prefix="portqueue-bench-procs-"))
        self.data = self.root / "data"
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.dsn = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        # PostgreSQL refuses to run as root: as root, run it as the postgres user.
        self.user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self.user:
            shutil.chown(self.root, "postgres")
        self._run("initdb", "-D", str(self.data), "--auth=trust", "-U", "postgres",
                  "--no-sync")
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "log"), "-w",
                  "-o", f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
                  f"-c max_connections={max_connections}", "start")

    def _run(self, program: str, *args: str) -> None:
        subprocess.run([*self.user, str(self.bin / program), *args], check=True,
                       stdout=subprocess.DEVNULL, cwd=self.root)

    def close(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


# --- a worker process ---


def run_worker(dsn: str, concurrency: int, name: str) -> None:
    apq = AsyncPortQueue(dsn, schema=SCHEMA, application_name=name, pool_min_size=0,
                         pool_max_size=1,
                         poll_only=os.environ.get("BENCH_POLL_ONLY") == "1")

    @apq.handler(QUEUE, concurrency=concurrency)
    async def handler(job: Any) -> None:
        pass

    asyncio.run(apq.run(scheduler=False))


def start_workers(dsn: str, count: int, concurrency: int) -> list[subprocess.Popen[bytes]]:
    me = [sys.executable, str(Path(__file__).resolve())]
    # The code under test: this checkout's, unless PYTHONPATH names another
    # (an A/B against another worktree).
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", str(ROOT))}
    procs = [subprocess.Popen([*me, "--role", "worker", "--dsn", dsn,
                               "--concurrency", str(concurrency), "--name", f"{PREFIX}{n}"],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for n in range(count)]
    with psycopg.connect(dsn, autocommit=True) as db:
        # Generous: on a loaded 2-core machine 16 processes took 77 s to import
        # and register.
        deadline = time.monotonic() + 120 + 4 * count
        while True:
            row = db.execute("SELECT count(*) FROM portqueue.worker").fetchone()
            if row is not None and row[0] >= count:
                return procs
            if time.monotonic() > deadline:
                stop_workers(procs)
                raise SystemExit(f"only {row} of {count} workers registered")
            time.sleep(0.1)


def stop_workers(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def worker_connections(db: psycopg.Connection[Any]) -> int:
    row = db.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE %s",
                     [f"{PREFIX}%"]).fetchone()
    return 0 if row is None else int(row[0])


def reset(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as db:
        db.execute("TRUNCATE portqueue.job, portqueue.worker")
        db.execute("VACUUM (ANALYZE) portqueue.job")


# --- the scenarios ---


def many_once(dsn: str, processes: int, total: int, jobs: int) -> dict[str, Any]:
    reset(dsn)
    procs = start_workers(dsn, processes, max(total // processes, 1))
    try:
        with PortQueue(dsn, schema=SCHEMA) as pq, \
                psycopg.connect(dsn, autocommit=True) as db:
            pq.pause_queue(queue=QUEUE)
            for start in range(0, jobs, 1000):
                pq.add_jobs(queue=QUEUE, jobs=[{"data": {"n": n}}
                                               for n in range(start, min(start + 1000, jobs))])
            most = worker_connections(db)
            began = time.perf_counter()
            pq.resume_queue(queue=QUEUE)
            while True:
                row = db.execute("SELECT count(*) FROM portqueue.job WHERE queue = %s "
                                 "AND status <> 'completed'", [QUEUE]).fetchone()
                most = max(most, worker_connections(db))
                if row is not None and row[0] == 0:
                    break
                time.sleep(0.02)
            seconds = time.perf_counter() - began
    finally:
        stop_workers(procs)
    return {"processes": processes, "concurrency_each": max(total // processes, 1),
            "jobs": jobs, "seconds": seconds, "rate": jobs / seconds,
            "worker_connections_max": most}


def cpu_seconds(procs: list[subprocess.Popen[bytes]]) -> float | None:
    """The CPU time the worker processes have used so far (Linux's
    /proc/<pid>/schedstat, nanoseconds on a CPU; None elsewhere). Unlike the
    producer's latency, it hardly moves with the machine's load."""
    total = 0
    try:
        for proc in procs:
            with open(f"/proc/{proc.pid}/schedstat") as stat:
                total += int(stat.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return total / 1e9


def cores(before: float | None, after: float | None, seconds: float) -> float | None:
    return None if before is None or after is None else (after - before) / seconds


def idle_round_trips(dsn: str, processes: int, window: float) -> float | None:
    """Statements per idle worker process per second, from pg_stat_statements
    over ``window`` seconds (None when the server does not track them)."""
    if window <= 0:
        return None
    with psycopg.connect(dsn, autocommit=True) as db:
        try:
            db.execute("SELECT pg_stat_statements_reset()")
        except psycopg.Error:
            return None
        began = time.perf_counter()
        time.sleep(window)
        row = db.execute("SELECT sum(calls) FROM pg_stat_statements "
                         "WHERE query NOT LIKE '%pg_stat_statements%'").fetchone()
        elapsed = time.perf_counter() - began
    return None if row is None or row[0] is None else float(row[0]) / processes / elapsed


def idle_once(dsn: str, processes: int, rate: float, seconds: float,
              settle: float, window: float = 0.0) -> dict[str, Any]:
    reset(dsn)
    procs = start_workers(dsn, processes, 10)
    try:
        # Each worker counts its queue's workers before LISTEN and at every
        # health check (15 s): the first to start counted only those before them.
        time.sleep(settle)
        cpu_before, began = cpu_seconds(procs), time.perf_counter()
        round_trips = idle_round_trips(dsn, processes, window)
        idle_cores = (cores(cpu_before, cpu_seconds(procs), time.perf_counter() - began)
                      if window > 0 else None)
        with PortQueue(dsn, schema=SCHEMA, application_name="bench-producer") as pq, \
                psycopg.connect(dsn, autocommit=True) as db:
            for n in range(20):  # warm: the pool's connection, prepared statements
                pq.add_job(queue=QUEUE, data={"warm": n})
            timings = []
            count = int(rate * seconds)
            cpu_before = cpu_seconds(procs)
            t0 = time.perf_counter() + 0.1
            for n in range(count):
                delay = t0 + n / rate - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                before = time.perf_counter()
                pq.add_job(queue=QUEUE, data={"n": n})
                timings.append((time.perf_counter() - before) * 1000)
            adding_cores = cores(cpu_before, cpu_seconds(procs), time.perf_counter() - t0)
            most = worker_connections(db)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                row = db.execute("SELECT count(*) FROM portqueue.job WHERE queue = %s "
                                 "AND started_at IS NULL", [QUEUE]).fetchone()
                if row is not None and row[0] == 0:
                    break
                time.sleep(0.05)
            # Commit-to-start, both ends the database's clock.
            starts = sorted(row[0] for row in db.execute(
                "SELECT extract(epoch FROM started_at - created_at) * 1000 FROM portqueue.job "
                "WHERE queue = %s AND data ? 'n' AND started_at IS NOT NULL", [QUEUE]))
    finally:
        stop_workers(procs)
    timings.sort()
    return {"processes": processes, "adds": len(timings),
            "add_p50_ms": statistics.median(timings),
            "add_p99_ms": timings[min(int(len(timings) * 0.99), len(timings) - 1)],
            "start_p50_ms": float(statistics.median(starts)) if starts else None,
            "start_p99_ms": float(starts[min(int(len(starts) * 0.99), len(starts) - 1)])
            if starts else None,
            "worker_connections": most, "round_trips_per_process_s": round_trips,
            # The worker processes' CPU, in cores: idle (over --idle-window)
            # and while the producer adds.
            "worker_cores_idle": idle_cores, "worker_cores_adding": adding_cores}


def summarise(scenario: str, results: list[dict[str, Any]], counts: list[int]) -> None:
    key = "rate" if scenario == "many" else "add_p50_ms"
    medians = {p: statistics.median(r[key] for r in results if r["processes"] == p)
               for p in counts}
    base = medians[counts[0]]
    print(f"\n{scenario}: median {key} over runs, and the ratio to {counts[0]} process(es)")
    for p in counts:
        conns = max(r.get("worker_connections_max", r.get("worker_connections", 0))
                    for r in results if r["processes"] == p)
        trips = [r["round_trips_per_process_s"] for r in results
                 if r["processes"] == p and r.get("round_trips_per_process_s") is not None]
        cpu = {kind: [r[f"worker_cores_{kind}"] for r in results if r["processes"] == p
                      and r.get(f"worker_cores_{kind}") is not None]
               for kind in ("idle", "adding")}
        print(f"  {p:3d} processes: {medians[p]:10.2f}  ratio {medians[p] / base:5.2f}  "
              f"worker connections (most) {conns}"
              + (f"  statements/process/s idle {statistics.median(trips):.2f}" if trips else "")
              + "".join(f"  worker CPU {kind} {statistics.median(values):.3f} cores"
                        for kind, values in cpu.items() if values))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario", nargs="?", choices=["many", "idle"])
    parser.add_argument("--role", choices=["worker"])
    parser.add_argument("--dsn")
    parser.add_argument("--processes", default=None)
    parser.add_argument("--total", type=int, default=500)
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--settle", type=float, default=16.0,
                        help="idle: seconds between the workers' start and the first add")
    parser.add_argument("--idle-window", type=float, default=0.0,
                        help="idle: seconds over which to count the idle workers' "
                        "statements (pg_stat_statements; a server that loads it)")
    parser.add_argument("--max-connections", type=int, default=250,
                        help="the bench cluster's (an A/B against code that holds more "
                        "connections per process needs more)")
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--name", default=PREFIX)
    args = parser.parse_args()
    if args.role == "worker":
        run_worker(args.dsn, args.concurrency, args.name)
        return
    if args.scenario is None:
        parser.error("choose a scenario: many or idle")
    default = "1,4,16,50" if args.scenario == "many" else "1,50"
    counts = [int(p) for p in (args.processes or default).split(",")]
    cluster = None if args.dsn else Cluster(args.max_connections)
    dsn = args.dsn or (cluster.dsn if cluster else "")
    try:
        with PortQueue(dsn, schema=SCHEMA) as pq:
            pq.migrate()
        results = []
        for run in range(args.runs):
            order = counts[run % len(counts):] + counts[:run % len(counts)]
            for p in order:
                if args.scenario == "many":
                    result = many_once(dsn, p, args.total, args.jobs)
                    print(f"run {run} processes={p}: {result['rate']:.0f} jobs/s "
                          f"({result['seconds']:.2f}s), worker connections "
                          f"{result['worker_connections_max']}", flush=True)
                else:
                    result = idle_once(dsn, p, args.rate, args.seconds, args.settle,
                                       args.idle_window)
                    print(f"run {run} processes={p}: add p50 {result['add_p50_ms']:.2f} ms, "
                          f"p99 {result['add_p99_ms']:.2f} ms, commit-to-start p50 "
                          f"{result['start_p50_ms']:.2f} ms p99 {result['start_p99_ms']:.0f} "
                          "ms, worker connections "
                          f"{result['worker_connections']}, statements per process "
                          f"per second idle {result['round_trips_per_process_s']}, worker "
                          f"CPU (cores) idle {result['worker_cores_idle']} adding "
                          f"{result['worker_cores_adding']}", flush=True)
                results.append({"run": run, **result})
        summarise(args.scenario, results, counts)
        RESULTS.mkdir(exist_ok=True)
        stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
        out = RESULTS / f"processes-{args.scenario}-{stamp}.json"
        out.write_text(json.dumps({"scenario": args.scenario, "args": vars(args),
                                   "results": results}, indent=1))
        print(f"wrote {out}")
    finally:
        if cluster is not None:
            cluster.close()


if __name__ == "__main__":
    main()
