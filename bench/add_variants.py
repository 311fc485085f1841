"""Each add statement's variant against the statement it stands in for, interleaved.

    python bench/add_variants.py --dsn postgresql://postgres@127.0.0.1:5445/postgres

Adding jobs picks among several INSERT statements (sql/produce.sql), each a
variant of the general one, ``add_jobs`` (typed arrays, ON CONFLICT). A
variant is worth its statement only if it is measurably cheaper than what
would run without it. This runs each comparison's arms block by block on one
connection of portqueue's own kind (``CursorKeepingConnection``, so the kept
cursors count as in the client), parameters built by the operations' own
helpers, and prints, per arm, the medians over the rounds of wall time,
client CPU (``time.process_time``) and the backend's CPU (from
``/proc/<pid>/schedstat``: the server must run on this machine) per add,
then each variant's ratio to its baseline, round by round.

The comparisons (variant -> what runs without it):

- ``open``: a single keyless add with an option, ``add_job_to_open_queue`` ->
  ``add_unkeyed_jobs`` of one;
- ``scalar``: a single keyed add, ``add_job`` -> ``add_jobs`` of one;
- ``unkeyed_batch``: 100 keyless jobs, ``add_unkeyed_jobs`` -> ``add_jobs``.

The variants retired for issue 17 (``add_default_job_to_open_queue``,
``add_unkeyed_job``) were measured with this script as of commit ``3d0cd14``
(docs/performance.md, section ``suite-fast``).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from portqueue.driver import CursorKeepingConnection, execute_sync
from portqueue.ids import uuid7
from portqueue.migrate import migrate
from portqueue.operations import _entry_arrays, _scalar_entry
from portqueue.queries import Queries, Query
from portqueue.validation import job_spec

SCHEMA = "portqueue"
QUEUE = "bench"
DATABASE = "bench_add_variants"
BATCH = 100

Statement = Callable[[Queries, int], Query]


def _spec(n: int, **options: Any) -> Any:
    spec, _ = job_spec({"data": {"seq": n}, **options}, instance_key=None,
                       max_payload_bytes=1 << 20, job_id=uuid7())
    return spec


def _single(name: str, *, keyed: bool = False, **options: Any) -> Statement:
    def statement(q: Queries, n: int) -> Query:
        spec = _spec(n, **options, **({"idempotency_key": f"k{n}"} if keyed else {}))
        if name in ("add_jobs", "add_unkeyed_jobs"):
            return q(name, queue=QUEUE, **_entry_arrays([spec]))
        return q(name, queue=QUEUE, **_scalar_entry(spec))
    return statement


def _batch(name: str) -> Statement:
    def statement(q: Queries, n: int) -> Query:
        return q(name, queue=QUEUE, **_entry_arrays([_spec(n + i) for i in range(BATCH)]))
    return statement


# comparison -> (adds per call, (variant, statement), (baseline, statement))
COMPARISONS: dict[str, tuple[int, tuple[str, Statement], tuple[str, Statement]]] = {
    "open": (1, ("add_job_to_open_queue", _single("add_job_to_open_queue", priority=1)),
             ("add_unkeyed_jobs", _single("add_unkeyed_jobs", priority=1))),
    "scalar": (1, ("add_job", _single("add_job", keyed=True)),
               ("add_jobs", _single("add_jobs", keyed=True))),
    "unkeyed_batch": (BATCH, ("add_unkeyed_jobs", _batch("add_unkeyed_jobs")),
                      ("add_jobs", _batch("add_jobs"))),
}


def _backend_ns(pid: int) -> int:
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


def _block(conn: psycopg.Connection[Any], q: Queries, pid: int, statement: Statement,
           calls: int, per_call: int, seq: list[int]) -> tuple[float, float, float]:
    """Microseconds per add: wall, client CPU, backend CPU."""
    wall, cpu, backend = time.perf_counter(), time.process_time(), _backend_ns(pid)
    for _ in range(calls):
        seq[0] += per_call
        execute_sync(conn, statement(q, seq[0]))
    adds = calls * per_call
    return ((time.perf_counter() - wall) * 1e6 / adds,
            (time.process_time() - cpu) * 1e6 / adds,
            (_backend_ns(pid) - backend) / 1e3 / adds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=300,
                        help="single adds per block (a batch comparison makes a tenth)")
    parser.add_argument("--only", default="", help="comma-separated comparisons")
    args = parser.parse_args()
    chosen = [c for c in COMPARISONS if not args.only or c in args.only.split(",")]

    with psycopg.connect(args.dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            sql.Identifier(DATABASE)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE)))
    dsn = psycopg.conninfo.make_conninfo(args.dsn, dbname=DATABASE)
    migrate(dsn, schema=SCHEMA)
    q = Queries(SCHEMA)
    seq = [0]
    figures: dict[str, list[tuple[float, float, float]]] = {}
    # synchronous_commit off: the commit's flush is the same for every arm and, on this
    # machine's disk, noisier than the differences measured.
    with CursorKeepingConnection.connect(dsn, autocommit=True,
                                         options="-c synchronous_commit=off") as conn:
        pid = conn.info.backend_pid
        execute_sync(conn, _single("add_unkeyed_jobs")(q, 0))  # the queue's row
        for round_ in range(args.rounds):
            for name in chosen:
                per_call, variant, baseline = COMPARISONS[name]
                calls = args.calls if per_call == 1 else max(args.calls // 10, 3)
                arms = (variant, baseline) if round_ % 2 == 0 else (baseline, variant)
                for label, statement in arms:
                    _block(conn, q, pid, statement, 20, per_call, seq)  # warm the cursor
                    figures.setdefault(f"{name}:{label}", []).append(
                        _block(conn, q, pid, statement, calls, per_call, seq))
            print(f"round {round_ + 1} done", flush=True)
            conn.execute(sql.SQL("TRUNCATE {}.job").format(sql.Identifier(SCHEMA)))
            conn.execute(sql.SQL("VACUUM {}.job").format(sql.Identifier(SCHEMA)))

    print("comparison       arm                             wall µs  client µs  backend µs")
    for name in chosen:
        _, (variant, _v), (baseline, _b) = COMPARISONS[name]
        for label in (variant, baseline):
            rows = figures[f"{name}:{label}"]
            medians = [statistics.median(r[i] for r in rows) for i in range(3)]
            print(f"{name:16} {label:30} {medians[0]:8.1f} {medians[1]:10.1f} {medians[2]:11.1f}")
        ratios = [[v[i] / b[i] for v, b in zip(figures[f"{name}:{variant}"],
                                               figures[f"{name}:{baseline}"], strict=True)]
                  for i in range(3)]
        print(f"{name:16} variant/baseline median (min-max; rounds below 1): " + ", ".join(
            f"{kind} {statistics.median(r):.3f} ({min(r):.2f}-{max(r):.2f}; "
            f"{sum(x < 1 for x in r)}/{len(r)})"
            for kind, r in zip(("wall", "client", "backend"), ratios, strict=True)))


if __name__ == "__main__":
    main()
