"""Workflows (SPEC §9): what dependencies cost, against the same work without.

    python bench/workflows.py --runs 5            # about a minute on a quiet machine
    python bench/workflows.py --main /work/main   # also the plain drain on another checkout

Runs on the current environment (no bench venv, no peers) against BENCH_DSN or
--dsn, in schemas of its own that it drops at the end. Three figures, each a
ratio of medians taken in the same run, the runs interleaved:

- ``add``: ``add_flow`` of a 100-job flow (one root, 98 jobs that depend on
  it, one that depends on those 98) against ``add_jobs`` of 100 jobs, each
  call its own transaction, ``--adds`` calls of each per run; the ratio is
  flow time over add_jobs time (the target: at most 2).
- ``drain``: a worker process (``workflows_child.py``: async no-op handler,
  concurrency 100) drains ``--drain`` jobs of one queue: half of them
  dependencies, the other half each depending on one of those (so every
  dependency's completion releases a job, in the completing transaction),
  against the same number of jobs without dependencies; the ratio is the
  plain drain's time over the dependent one's (the target: at least 0.7).
- ``plain``: with ``--main``, the plain drain on that checkout (its own
  migrations, its worker) against this one's; the ratio is main's time over
  this checkout's (the target: at least 0.97, "not slower"). The dependent
  drain runs on that checkout too, so a change to dependencies is measured
  before and after in one run.

Each drain also reports the CPU time the database's backends spent on it
(``/proc/<pid>/schedstat``, so the server must run on this machine): on a
machine shared with other work, wall time moves by more than these changes
cost, CPU time much less. The drains run in a database of their own,
``bench_workflows`` (created and dropped; needs a superuser), so no other
session's CPU is counted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parent.parent


def checkout_env(root: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(root)}


def migrate(dsn: str, schema: str, root: Path) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    subprocess.run([sys.executable, "-c", "import sys; from portqueue.migrate import migrate; "
                    "migrate(sys.argv[1], schema=sys.argv[2])", dsn, schema],
                   env=checkout_env(root), cwd=root, check=True)


def empty(dsn: str, schema: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("TRUNCATE {}").format(sql.Identifier(schema, "job")))
        conn.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.Identifier(schema, "job")))


def drain(dsn: str, schema: str, root: Path) -> tuple[float, float]:
    """Wall seconds, and the database's backend CPU seconds, of one drain."""
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "workflows_child.py"), dsn,
                          schema], env=checkout_env(root), capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"the drain of {root} failed:\n{out.stderr[-3000:]}")
    wall, cpu = out.stdout.strip().splitlines()[-1].split()
    return float(wall), int(cpu) / 1e9


def add_round(dsn: str, schema: str, adds: int) -> tuple[float, float]:
    from portqueue import PortQueue

    flow = [{"key": "root", "queue": "adds", "data": {"n": 0}},
            *({"key": f"m{n}", "queue": "adds", "data": {"n": n}, "depends_on": ["root"]}
              for n in range(98)),
            {"key": "sink", "queue": "adds", "data": {},
             "depends_on": [f"m{n}" for n in range(98)]}]
    batch = [{"data": {"n": n}} for n in range(100)]
    flow_times, batch_times = [], []
    with PortQueue(dsn, schema=schema) as pq:
        pq.add_jobs(queue="adds", jobs=batch)  # warm: pool, prepared statements
        pq.add_flow(jobs=flow)
        for _ in range(adds):
            started = time.perf_counter()
            pq.add_jobs(queue="adds", jobs=batch)
            batch_times.append(time.perf_counter() - started)
            started = time.perf_counter()
            pq.add_flow(jobs=flow)
            flow_times.append(time.perf_counter() - started)
    return statistics.median(flow_times), statistics.median(batch_times)


def add_drain_jobs(dsn: str, schema: str, n: int, dependent: bool) -> None:
    from portqueue import PortQueue

    with PortQueue(dsn, schema=schema) as pq:
        if not dependent:
            for start in range(0, n, 1000):
                pq.add_jobs(queue="drain", jobs=[{"data": {"n": i}}
                                                 for i in range(start, min(n, start + 1000))])
            return
        for start in range(0, n // 2, 500):
            count = min(n // 2, start + 500) - start
            parents = pq.add_jobs(queue="drain", jobs=[{"data": {"n": i}} for i in range(count)])
            pq.add_jobs(queue="drain", jobs=[{"data": {"n": i}, "depends_on": [p.job_id]}
                                             for i, p in enumerate(parents)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default=os.environ.get(
        "BENCH_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--adds", type=int, default=30)
    parser.add_argument("--drain", type=int, default=4000)
    parser.add_argument("--main", type=Path, default=None,
                        help="another checkout whose plain drain to compare with")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    with psycopg.connect(args.dsn, autocommit=True) as admin:
        admin.execute("DROP DATABASE IF EXISTS bench_workflows WITH (FORCE)")
        admin.execute("CREATE DATABASE bench_workflows")
    server_dsn = args.dsn
    args.dsn = psycopg.conninfo.make_conninfo(args.dsn, dbname="bench_workflows")
    here, base = "bench_wf_here", "bench_wf_main"
    migrate(args.dsn, here, ROOT)
    if args.main:
        migrate(args.dsn, base, args.main)
    adds, dependent, plain, main_plain, main_dependent = [], [], [], [], []
    try:
        for run in range(args.runs):
            empty(args.dsn, here)
            adds.append(add_round(args.dsn, here, args.adds))
            order = [True, False] if run % 2 == 0 else [False, True]
            # Which checkout drains first alternates too: a drain that follows
            # another measured differently from the first of a run.
            sides = [(here, ROOT, dependent, plain)]
            if args.main:
                sides.append((base, args.main, main_dependent, main_plain))
            for schema, root, with_results, without_results in (
                    sides if run % 4 < 2 else sides[::-1]):
                for with_dependencies in order:
                    empty(args.dsn, schema)
                    add_drain_jobs(args.dsn, schema, args.drain, with_dependencies)
                    (with_results if with_dependencies else without_results).append(
                        drain(args.dsn, schema, root))
            print(f"run {run + 1}: add flow {adds[-1][0] * 1000:.2f} ms, add_jobs "
                  f"{adds[-1][1] * 1000:.2f} ms; drain plain {plain[-1][0]:.3f} s "
                  f"({plain[-1][1]:.3f} s CPU), with one dependency {dependent[-1][0]:.3f} s "
                  f"({dependent[-1][1]:.3f} s CPU)"
                  + (f"; main plain {main_plain[-1][0]:.3f} s ({main_plain[-1][1]:.3f} s CPU), "
                     f"with one dependency {main_dependent[-1][0]:.3f} s "
                     f"({main_dependent[-1][1]:.3f} s CPU)" if main_plain else ""), flush=True)
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as admin:
            admin.execute("DROP DATABASE IF EXISTS bench_workflows WITH (FORCE)")
    flow_ms = statistics.median(a[0] for a in adds) * 1000
    batch_ms = statistics.median(a[1] for a in adds) * 1000
    print(f"add: 100-job flow {flow_ms:.2f} ms, add_jobs of 100 {batch_ms:.2f} ms, "
          f"ratio {flow_ms / batch_ms:.2f} (target <= 2)")
    for index, what in ((0, "wall"), (1, "backend CPU")):
        p = statistics.median(r[index] for r in plain)
        d = statistics.median(r[index] for r in dependent)
        print(f"drain of {args.drain}, {what}: plain {p * 1e6 / args.drain:.1f} us/job, half "
              f"depending on the other half {d * 1e6 / args.drain:.1f} us/job, ratio "
              f"{p / d:.2f} (target >= 0.7)")
        if main_plain:
            m = statistics.median(r[index] for r in main_plain)
            print(f"plain drain, {what}: {args.main} {m * 1e6 / args.drain:.1f} us/job, this "
                  f"checkout {p * 1e6 / args.drain:.1f} us/job, ratio {m / p:.2f} "
                  "(target >= 0.97)")
            md = statistics.median(r[index] for r in main_dependent)
            print(f"dependent drain, {what}: {args.main} {md * 1e6 / args.drain:.1f} us/job "
                  f"(ratio to its plain drain {m / md:.2f}), this checkout "
                  f"{d * 1e6 / args.drain:.1f} us/job")


if __name__ == "__main__":
    main()
