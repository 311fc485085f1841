"""The ``error`` column's cost on the hot path (issue 16, item 10; migration 0007).

    python bench/error_column.py --without DIR [--dsn DSN] [--runs 5] [--jobs 5000]

Two variants of the same code, each run as its own processes:

- ``with``: this checkout (or ``BENCH_WITH``, a frozen copy of it, so that
  editing the checkout during a run does not change what is measured);
- ``without``: ``--without DIR``, a copy of this checkout whose statements do not
  write the column (``tools`` are not needed there: only ``portqueue/`` and
  ``sql/`` are read). The column itself is still created by the migration; it is
  NULL on every row, which costs a bit in the row's null bitmap and nothing else.

Three scenarios, each in a fresh database:

- ``add_single``: ``--adds`` calls of ``PortQueue.add_job`` (autocommit, one
  transaction each) after 20 warm-up adds; jobs per second inside the producer;
- ``drain``: ``--jobs`` no-op jobs pre-added, one worker (``AsyncPortQueue``,
  concurrency 100, LISTEN on, maintenance off); jobs per second, timed in the
  worker's process from the first handler call to the moment a poll (every
  10 ms) sees every job finished;
- ``fail_drain``: as ``drain`` with a handler that raises and a retry policy of
  three attempts, no delay: every job fails three times (three ``fail_jobs``
  writes, each adding an error with its traceback) and ends ``failed``; attempts
  per second, timed as ``drain``.

And ``statement`` (on request, ``--scenarios statement``): the fail_jobs statement
alone, as each variant renders it, on ``--jobs`` jobs claimed by SQL, five
times per run in transactions rolled back, its median; failures per second of
statement time (the worker, the harness and the machine's other work left out).

Runs interleave the variants and scenarios (each run starts with the other
variant); ratios ``with / without`` are taken within a run, then their median.
Raw figures go to bench/results/error-column-<time>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psycopg

DATABASE = "bench_error_column"
QUEUE = "drain"
CONCURRENCY = 100
ATTEMPTS = 3
RESULTS = Path(__file__).resolve().parent / "results"
REPO = Path(__file__).resolve().parent.parent
SCENARIOS = ["add_single", "drain", "fail_drain"]  # and "statement", on request
VARIANTS = ["with", "without"]
WITH = os.environ.get("BENCH_WITH", str(REPO))


def child(role: str, variant: str, dsn: str, without: str, *extra: str) -> str:
    env = dict(os.environ)
    env["PYTHONPATH"] = without if variant == "without" else WITH
    argv = [sys.executable, __file__, "--role", role, "--dsn", dsn, *extra]
    done = subprocess.run(argv, env=env, cwd="/", text=True, capture_output=True,
                          timeout=900, check=False)
    if done.returncode:
        raise RuntimeError(f"{role} {variant} exited {done.returncode}: {done.stderr}")
    return done.stdout


def prepare(dsn: str, jobs: int) -> None:
    """(child) Migrate and pre-add the jobs, with the queue's retry policy."""
    from portqueue import PortQueue

    with PortQueue(dsn) as pq:
        pq.migrate()
        pq.create_queue(queue=QUEUE, handler=lambda job: None,
                        retry={"max_attempts": ATTEMPTS, "delay_seconds": 0})
        for start in range(0, jobs, 1000):
            pq.add_jobs(queue=QUEUE, jobs=[{"data": {"n": n}}
                                           for n in range(start, min(jobs, start + 1000))])
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE)")


def add_single(dsn: str, adds: int) -> None:
    """(child) Migrate, then time single adds; prints jobs per second."""
    from portqueue import PortQueue

    with PortQueue(dsn) as pq:
        pq.migrate()
        for n in range(20):
            pq.add_job(queue=QUEUE, data={"warm": n})
        began = time.perf_counter()
        for n in range(adds):
            pq.add_job(queue=QUEUE, data={"seq": n})
        print(adds / (time.perf_counter() - began))


def work(dsn: str, failing: bool) -> None:
    """(child) A worker until every job of the queue is finished."""
    from portqueue import AsyncPortQueue

    async def main() -> None:
        apq = AsyncPortQueue(dsn)

        first: list[float] = []

        async def handler(job: Any) -> None:
            if not first:
                first.append(time.perf_counter())
            if failing:
                raise RuntimeError(f"attempt {job.attempt} of job {job.id} failed")

        apq.create_queue(queue=QUEUE, handler=handler, concurrency=CONCURRENCY,
                         retry={"max_attempts": ATTEMPTS, "delay_seconds": 0})
        await apq.start(maintenance=False, scheduler=False)
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            while True:
                cursor = await conn.execute(
                    "SELECT count(*) FROM portqueue.job WHERE finished_at IS NULL")
                row = await cursor.fetchone()
                if row is not None and row[0] == 0:
                    break
                await asyncio.sleep(0.01)
        print(time.perf_counter() - first[0])
        await apq.stop()
        await apq.aclose()

    asyncio.run(main())


def statement(dsn: str, jobs: int, rounds: int) -> None:
    """(child) The fail_jobs statement alone, as this variant renders it:
    ``rounds`` times, in a transaction rolled back each time, claim ``jobs``
    pending jobs by SQL and fail them all in one fail_jobs (retry, an error
    with a 2 KB traceback); prints the median seconds of the statement."""
    from portqueue import worker_operations as ops
    from portqueue.driver import execute_sync
    from portqueue.queries import queries_for

    queries = queries_for("portqueue")
    times = []
    with psycopg.connect(dsn) as conn:
        for _ in range(rounds):
            rows = conn.execute(
                "UPDATE portqueue.job SET status = 'active', lease_token = 1, attempt = 1, "
                "lease_expires_at = now() + interval '1 minute' "
                "WHERE id IN (SELECT id FROM portqueue.job WHERE status = 'pending' LIMIT %s) "
                "RETURNING id::text", [jobs]).fetchall()
            entries = [ops.failure_entry(
                row[0], 1, status="failed", retry=True, delay_seconds=0.0,
                error={"attempt": 1, "type": "RuntimeError", "message": f"job {row[0]} failed",
                       "traceback": "x" * 2048}) for row in rows]
            began = time.perf_counter()
            execute_sync(conn, ops.fail_jobs(queries, entries))
            times.append(time.perf_counter() - began)
            conn.rollback()
    print(statistics.median(times))


def interleaved(dsn: str, jobs: int, rounds: int) -> None:
    """(child) As ``statement``, both variants in one session, round by round
    (alternating which goes first): this code's fail_jobs, and the same text
    without the line that writes ``error``. Prints, for the wall clock and for
    the backend's CPU time, the median of the per-round ratios with / without
    (above 1: the write costs) and each variant's median seconds.

        PYTHONPATH=. python bench/error_column.py --role interleaved \\
            --dsn <a database prepared by --scenarios statement> --jobs 1000 --rounds 40
    """
    from portqueue import worker_operations as ops
    from portqueue.queries import queries_for

    queries = queries_for("portqueue")
    write = "error = f.error ->> 'message',"
    times: dict[str, list[float]] = {"with": [], "without": []}
    cpu: dict[str, list[float]] = {"with": [], "without": []}
    with psycopg.connect(dsn) as conn:
        # The backend's CPU time (the server runs on this machine), less
        # disturbed by the machine's other work than the wall clock.
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
        schedstat = Path(f"/proc/{pid}/schedstat")
        for n in range(2 * rounds):
            variant = ["with", "without"][(n + n // 2) % 2]
            rows = conn.execute(
                "UPDATE portqueue.job SET status = 'active', lease_token = 1, attempt = 1, "
                "lease_expires_at = now() + interval '1 minute' "
                "WHERE id IN (SELECT id FROM portqueue.job WHERE status = 'pending' LIMIT %s) "
                "RETURNING id::text", [jobs]).fetchall()
            query = ops.fail_jobs(queries, [ops.failure_entry(
                row[0], 1, status="failed", retry=True, delay_seconds=0.0,
                error={"attempt": 1, "type": "RuntimeError", "message": f"job {row[0]} failed",
                       "traceback": "x" * 2048}) for row in rows])
            if write not in query.sql:
                raise RuntimeError("fail_jobs no longer writes error as expected")
            text = query.sql if variant == "with" else query.sql.replace(write, "")
            on_cpu = int(schedstat.read_text().split()[0])
            began = time.perf_counter()
            conn.execute(text.encode(), query.params).fetchall()  # type: ignore[call-overload]
            times[variant].append(time.perf_counter() - began)
            cpu[variant].append((int(schedstat.read_text().split()[0]) - on_cpu) / 1e9)
            conn.rollback()

    def summary(values: dict[str, list[float]]) -> dict[str, Any]:
        ratios = [a / b for a, b in zip(values["with"], values["without"], strict=True)]
        return {"ratio": statistics.median(ratios), "ratios": ratios,
                "above_1": sum(r > 1 for r in ratios),
                "with": statistics.median(values["with"]),
                "without": statistics.median(values["without"])}

    print(json.dumps({"wall": summary(times), "backend_cpu": summary(cpu)}))


def fresh(dsn: str, database: str = DATABASE) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {database}")
    return psycopg.conninfo.make_conninfo(dsn, dbname=database)


def measure(dsn: str, scenario: str, variant: str, args: argparse.Namespace) -> float:
    if scenario == "statement":
        return args.jobs / float(child("statement", variant, args.statement_dsn, args.without,
                                       "--jobs", str(args.jobs),
                                       "--rounds", str(args.rounds)).strip())
    bench = fresh(dsn)
    if scenario == "add_single":
        return float(child("add_single", variant, bench, args.without,
                           "--adds", str(args.adds)).strip())
    child("prepare", variant, bench, args.without, "--jobs", str(args.jobs))
    seconds = float(child("work", variant, bench, args.without,
                          *(["--failing"] if scenario == "fail_drain" else [])).strip())
    want = "failed" if scenario == "fail_drain" else "completed"
    errors = ATTEMPTS if scenario == "fail_drain" else 0
    with psycopg.connect(bench) as conn:
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE status::text = %s AND jsonb_array_length(errors) = %s)"
            " FROM portqueue.job", (want, errors)).fetchone()
    if row is None or row[0] != args.jobs:
        raise RuntimeError(f"{scenario} {variant}: {row} of {args.jobs} {want}")
    return args.jobs * (ATTEMPTS if scenario == "fail_drain" else 1) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--adds", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--without", default="", help="a copy that does not write the column")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--role", choices=["measure", "prepare", "work", "add_single",
                                           "statement", "interleaved"],
                        default="measure")
    parser.add_argument("--failing", action="store_true")
    args = parser.parse_args()
    if args.role == "prepare":
        return prepare(args.dsn, args.jobs)
    if args.role == "add_single":
        return add_single(args.dsn, args.adds)
    if args.role == "work":
        return work(args.dsn, args.failing)
    if args.role == "statement":
        return statement(args.dsn, args.jobs, args.rounds)
    if args.role == "interleaved":
        return interleaved(args.dsn, args.jobs, args.rounds)
    if not args.without:
        parser.error("--without DIR is needed")
    chosen = args.scenarios.split(",")
    if "statement" in chosen:
        # One database for both variants (the schema is the same): the jobs
        # are added once, and every round is rolled back.
        args.statement_dsn = fresh(args.dsn, f"{DATABASE}_statement")
        child("prepare", "with", args.statement_dsn, args.without, "--jobs", str(args.jobs))
    runs: list[dict[str, dict[str, float]]] = []
    for run in range(args.runs):
        results: dict[str, dict[str, float]] = {}
        for scenario in chosen:
            order = VARIANTS if run % 2 == 0 else VARIANTS[::-1]
            for variant in order:
                rate = measure(args.dsn, scenario, variant, args)
                results.setdefault(scenario, {})[variant] = rate
                print(f"run {run + 1} {scenario} {variant}: {rate:,.0f}/s", flush=True)
        runs.append(results)
    summary: dict[str, dict[str, Any]] = {}
    for scenario in chosen:
        ratios = [r[scenario]["with"] / r[scenario]["without"] for r in runs]
        summary[scenario] = {
            "with": statistics.median(r[scenario]["with"] for r in runs),
            "without": statistics.median(r[scenario]["without"] for r in runs),
            "ratio": statistics.median(ratios), "ratios": ratios,
        }
        s = summary[scenario]
        print(f"{scenario}: with {s['with']:,.0f}/s, without {s['without']:,.0f}/s, "
              f"ratio median {s['ratio']:.3f} (min {min(ratios):.3f}, max {max(ratios):.3f})")
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = RESULTS / f"error-column-{stamp}.json"
    path.write_text(json.dumps({"runs": runs, "summary": summary, "args": vars(args),
                                "measured_at": time.time()}, indent=2))
    print(f"raw figures: {path}")


if __name__ == "__main__":
    main()
