"""How ``add_flow`` grows with a flow's size: a chain of N jobs (each depending
on the one before, the deepest graph of N jobs) and a fan-in of N (N - 1
independent jobs and one that depends on all of them), each added in one
call, against ``add_jobs`` of N jobs without dependencies.

    python bench/flow_sizes.py --sizes 1000,2500,5000 --repeats 3
    python bench/flow_sizes.py --main /path/to/other/checkout   # the same on it

Runs on the current environment against BENCH_DSN or --dsn, in schemas of its
own that it drops at the end. Each checkout runs in a process of its own (its
PYTHONPATH), the checkouts interleaved per size and repeat; it prints the
median seconds of each, the client's CPU share of it, and the time per job,
which stays flat when the add is linear.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parent.parent

CHILD = """
import json, sys, time
from portqueue import PortQueue
dsn, schema, kind, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
if kind == "chain":
    jobs = [{"key": "k0", "queue": "sizes", "data": 0}] + [
        {"key": f"k{i}", "queue": "sizes", "data": i, "depends_on": [f"k{i - 1}"]}
        for i in range(1, n)]
elif kind == "fan-in":
    jobs = [{"key": f"k{i}", "queue": "sizes", "data": i} for i in range(n - 1)] + [
        {"key": "sink", "queue": "sizes", "data": n,
         "depends_on": [f"k{i}" for i in range(n - 1)]}]
else:
    jobs = [{"data": i} for i in range(n)]
with PortQueue(dsn, schema=schema) as pq:
    pq.add_jobs(queue="sizes", jobs=[{"data": 0}])  # warm: pool, prepared statements
    wall, cpu = time.perf_counter(), time.process_time()
    if kind == "add_jobs":
        pq.add_jobs(queue="sizes", jobs=jobs)
    else:
        pq.add_flow(jobs=jobs)
    print(json.dumps([time.perf_counter() - wall, time.process_time() - cpu]))
"""


def migrate(dsn: str, schema: str, root: Path) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    subprocess.run([sys.executable, "-c", "import sys; from portqueue.migrate import migrate; "
                    "migrate(sys.argv[1], schema=sys.argv[2])", dsn, schema],
                   env={**os.environ, "PYTHONPATH": str(root)}, cwd=root, check=True)


def one(dsn: str, schema: str, root: Path, kind: str, n: int) -> tuple[float, float]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("TRUNCATE {}").format(sql.Identifier(schema, "job")))
    out = subprocess.run([sys.executable, "-c", CHILD, dsn, schema, kind, str(n)],
                         env={**os.environ, "PYTHONPATH": str(root)}, cwd=root,
                         capture_output=True, text=True, check=True)
    wall, cpu = json.loads(out.stdout.strip().splitlines()[-1])
    return float(wall), float(cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default=os.environ.get(
        "BENCH_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"))
    parser.add_argument("--sizes", default="1000,2500,5000")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--kinds", default="chain,fan-in,add_jobs")
    parser.add_argument("--main", type=Path, default=None,
                        help="another checkout to measure in the same run")
    args = parser.parse_args()
    roots = {"here": ROOT, **({"main": args.main} if args.main else {})}
    for label, root in roots.items():
        migrate(args.dsn, f"bench_sizes_{label}", root)
    times: dict[tuple[str, str, int], list[tuple[float, float]]] = {}
    try:
        for n in (int(size) for size in args.sizes.split(",")):
            for repeat in range(args.repeats):
                for kind in args.kinds.split(","):
                    labels = list(roots) if repeat % 2 == 0 else list(reversed(roots))
                    for label in labels:
                        times.setdefault((label, kind, n), []).append(
                            one(args.dsn, f"bench_sizes_{label}", roots[label], kind, n))
            for kind in args.kinds.split(","):
                for label in roots:
                    runs = times[(label, kind, n)]
                    wall = statistics.median(r[0] for r in runs)
                    cpu = statistics.median(r[1] for r in runs)
                    print(f"{label:5} {kind:9} n={n:6}: {wall:8.3f} s ({cpu:.3f} s client CPU), "
                          f"{wall * 1e6 / n:8.1f} us/job", flush=True)
    finally:
        with psycopg.connect(args.dsn, autocommit=True) as conn:
            for label in roots:
                conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
                    sql.Identifier(f"bench_sizes_{label}")))


if __name__ == "__main__":
    main()
