"""Claims and adds while the pruner deletes a million finished jobs.

    .venv/bin/python bench/prune_under_load.py [--dsn DSN] [--rows 1000000] [--rate 200]

Three processes on one server, so none steals the others' interpreter:
- this one adds a job to queue ``live`` every 1/rate s (one ``add_job`` per
  transaction) and times each call;
- a worker (``--role worker``) claims and completes them (a no-op handler);
- a pruner (``--role prune``) runs ``portqueue.maintenance.run_pass`` once,
  which deletes every finished job past retention in batches of 1,000.

The table is loaded first with ``--rows`` completed jobs finished 8 days ago
(past the default 7-day retention), then ``VACUUM (ANALYZE)``. The run has
three phases of adds: ``before`` (10 s, no pruning), ``during`` (until the
pruner exits) and ``after`` (10 s). Commit-to-claim latency is read from the
job rows (``started_at - created_at``, both the database clock); add latency
is the producer's wall time around ``add_job``. Prints one line per phase
and writes the raw figures to bench/results/prune-under-load-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psycopg

from portqueue import PortQueue
from portqueue.maintenance import run_pass

DATABASE = "bench_prune"
LIVE = "live"
HISTORY = "history"
QUIET_PHASE_SECONDS = 10.0
RESULTS = Path(__file__).resolve().parent / "results"

# Triggers off (session_replication_role): the history is loaded, not added.
LOAD_HISTORY = """
INSERT INTO portqueue.job (id, queue, status, data, attempt, max_attempts,
                           created_at, start_after, started_at, finished_at)
SELECT gen_random_uuid(), %(queue)s, 'completed', '{}'::jsonb, 1, 1,
       t - interval '1 second', t - interval '1 second', t - interval '1 second', t
FROM generate_series(1, %(rows)s) AS g,
     LATERAL (SELECT now() - interval '8 days' - g * interval '1 millisecond' AS t) AS f
"""


def server_dsn(dsn: str, database: str) -> str:
    return psycopg.conninfo.make_conninfo(dsn, dbname=database)


def prepare(dsn: str, rows: int) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DATABASE}")
    bench = server_dsn(dsn, DATABASE)
    with PortQueue(bench) as pq:
        pq.migrate()
        pq.add_job(queue=HISTORY, data={})  # the queue row the history belongs to
    started = time.monotonic()
    with psycopg.connect(bench, autocommit=True) as conn:
        with conn.transaction():
            conn.execute("SET LOCAL session_replication_role = replica")
            conn.execute(LOAD_HISTORY, {"queue": HISTORY, "rows": rows})
        conn.execute("VACUUM (ANALYZE) portqueue.job")
    print(f"loaded {rows:,} finished jobs in {time.monotonic() - started:.1f} s", flush=True)
    return bench


def run_worker(dsn: str) -> None:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with PortQueue(dsn) as pq:
        pq.create_queue(queue=LIVE, handler=lambda job: None, concurrency=10)
        pq.start(maintenance=False, scheduler=False, poll_interval=0.05)
        print("ready", flush=True)
        stop.wait()
        pq.stop()


def run_prune(dsn: str) -> None:
    started = time.monotonic()
    removed = run_pass(dsn)
    print(json.dumps({"seconds": time.monotonic() - started, **removed}), flush=True)


def add_for(pq: PortQueue, phase: str, seconds: float | None, rate: float,
            until: subprocess.Popen[str] | None, adds: list[dict[str, Any]]) -> None:
    """Add one job every 1/rate s for ``seconds``, or until ``until`` exits."""
    period = 1.0 / rate
    begin = time.monotonic()
    tick = begin
    while (seconds is not None and time.monotonic() - begin < seconds) or (
            until is not None and until.poll() is None):
        started = time.perf_counter()
        job_id = pq.add_job(queue=LIVE, data={"phase": phase}).job_id
        adds.append({"id": job_id, "phase": phase,
                     "add_ms": (time.perf_counter() - started) * 1000})
        tick += period
        time.sleep(max(0.0, tick - time.monotonic()))


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    cuts = statistics.quantiles(ordered, n=100, method="inclusive")
    return {"n": len(ordered), "p50": cuts[49], "p95": cuts[94], "p99": cuts[98],
            "max": ordered[-1]}


def claim_latencies(dsn: str, adds: list[dict[str, Any]]) -> dict[str, float]:
    ids = [a["id"] for a in adds]
    deadline = time.monotonic() + 60
    with psycopg.connect(dsn, autocommit=True) as conn:
        while True:
            rows = conn.execute(
                "SELECT id::text, extract(epoch FROM started_at - created_at) * 1000"
                " FROM portqueue.job WHERE id = ANY(%s::uuid[]) AND status = 'completed'",
                (ids,)).fetchall()
            if len(rows) == len(ids) or time.monotonic() > deadline:
                return {job_id: float(ms) for job_id, ms in rows}
            time.sleep(0.2)


def measure(dsn: str, rows: int, rate: float) -> dict[str, Any]:
    bench = prepare(dsn, rows)
    me = [sys.executable, __file__, "--dsn", bench]
    worker = subprocess.Popen([*me, "--role", "worker"], stdout=subprocess.PIPE, text=True)
    assert worker.stdout is not None and worker.stdout.readline().strip() == "ready"
    adds: list[dict[str, Any]] = []
    try:
        with PortQueue(bench) as pq:
            add_for(pq, "before", QUIET_PHASE_SECONDS, rate, None, adds)
            pruner = subprocess.Popen([*me, "--role", "prune"], stdout=subprocess.PIPE,
                                      text=True)
            add_for(pq, "during", None, rate, pruner, adds)
            assert pruner.stdout is not None
            prune = json.loads(pruner.stdout.read())
            add_for(pq, "after", QUIET_PHASE_SECONDS, rate, None, adds)
        claims = claim_latencies(bench, adds)
    finally:
        worker.terminate()
        worker.wait(30)
    phases: dict[str, Any] = {}
    for phase in ("before", "during", "after"):
        mine = [a for a in adds if a["phase"] == phase]
        phases[phase] = {
            "add_ms": percentiles([a["add_ms"] for a in mine]),
            "claim_ms": percentiles([claims[a["id"]] for a in mine if a["id"] in claims]),
            "unclaimed": sum(1 for a in mine if a["id"] not in claims),
        }
    return {"rows": rows, "rate": rate, "prune": prune, "phases": phases}


def report(result: dict[str, Any]) -> None:
    prune = result["prune"]
    print(f"pruned {prune['pruner']:,} rows in {prune['seconds']:.1f} s "
          f"({prune['pruner'] / prune['seconds']:,.0f} rows/s)")
    print(f"{'phase':<8} {'adds':>6} {'add p50/p99/max ms':>22} {'claim p50/p99/max ms':>24}")
    for phase, figures in result["phases"].items():
        add, claim = figures["add_ms"], figures["claim_ms"]
        print(f"{phase:<8} {add['n']:>6} "
              f"{add['p50']:>7.2f}/{add['p99']:>6.2f}/{add['max']:>7.2f} "
              f"{claim['p50']:>9.2f}/{claim['p99']:>6.2f}/{claim['max']:>7.2f}"
              + (f"  ({figures['unclaimed']} unclaimed)" if figures["unclaimed"] else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rate", type=float, default=200.0, help="adds per second")
    parser.add_argument("--role", choices=["measure", "worker", "prune"], default="measure")
    args = parser.parse_args()
    if args.role == "worker":
        return run_worker(args.dsn)
    if args.role == "prune":
        return run_prune(args.dsn)
    result = measure(args.dsn, args.rows, args.rate)
    report(result)
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = RESULTS / f"prune-under-load-{stamp}.json"
    path.write_text(json.dumps(result, indent=2))
    print(f"raw figures: {path}")


if __name__ == "__main__":
    main()
