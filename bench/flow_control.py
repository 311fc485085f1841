"""Flow control's cost on the drain, and a rate limit's accuracy (issue 19).

    python bench/flow_control.py [--dsn DSN] [--jobs 5000] [--runs 3] [--before DIR]

Each scenario pre-adds ``--jobs`` no-op jobs to queue ``drain`` in a fresh
database, then starts one worker process (``AsyncPortQueue``, ``async def``
handler, concurrency 100, LISTEN on, maintenance off) and times the drain on
the database clock, from the first ``started_at`` to the last ``finished_at``:

- ``before``: the code of ``--before`` (a checkout of the commit this branch
  started from; the worker runs with it first on ``sys.path``), its own schema;
- ``unlimited``: this code, no limit set (the plain claim);
- ``global100``: ``global_concurrency=100`` (the limited claim, one limit);
- ``partition50``: 50 partition keys, jobs spread evenly, ``partition_concurrency=1``
  (at most 50 of the 100 slots can be busy);
- ``rate``: ``rate_limit`` of ``--rate`` starts per second, ``--rate * 5`` jobs;
  its figure is the steady start rate (starts after the first window, per second of
  the windows they span), to compare with the limit;
- ``unlimited50`` (not run unless named): no limit, concurrency 50, the slots
  ``partition50`` can use at most, to tell the claim's cost from the slots' bound;
- ``before_global100``, ``before_partition50``, ``before_rate`` (not run unless named): those
  scenarios on the code of ``--before``, for before/after ratios in one run;
- ``variant_global100``, ``variant_partition50`` (not run unless named): the same on
  the code of ``--variant`` (a checkout with one change left out: its ratio to this
  code is that change's effect).

Runs interleave the scenarios (each run starts with a different one); the ratios
(``unlimited / before``, ``global100 / unlimited``, ``partition50 / unlimited``) are
taken within a run, then their median. Raw figures go to
bench/results/flow-control-<time>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psycopg

DATABASE = "bench_flow_control"
QUEUE = "drain"
CONCURRENCY = 100
KEYS = 50
RESULTS = Path(__file__).resolve().parent / "results"
REPO = Path(__file__).resolve().parent.parent
SCENARIOS = ["before", "unlimited", "global100", "partition50", "rate"]
# Scenario -> (limits scenario, code, worker concurrency).
EXTRA = {"unlimited50": ("unlimited", "this", KEYS),
         "before_global100": ("global100", "before", CONCURRENCY),
         "before_partition50": ("partition50", "before", CONCURRENCY),
         "variant_global100": ("global100", "variant", CONCURRENCY),
         "variant_partition50": ("partition50", "variant", CONCURRENCY),
         "before_rate": ("rate", "before", CONCURRENCY)}


def setup(scenario: str) -> tuple[str, str, int]:
    """What the scenario limits, whose code it runs and its worker's concurrency."""
    if scenario in EXTRA:
        return EXTRA[scenario]
    if scenario == "before":
        return "unlimited", "before", CONCURRENCY
    return scenario, "this", CONCURRENCY


def server_dsn(dsn: str, database: str) -> str:
    return psycopg.conninfo.make_conninfo(dsn, dbname=database)


def code_env(scenario: str, before: str) -> dict[str, str]:
    """``before`` is "BEFORE_DIR[:VARIANT_DIR]"."""
    env = dict(os.environ)
    before_dir, _, variant_dir = before.partition(":")
    code = setup(scenario)[1]
    env["PYTHONPATH"] = {"before": before_dir, "variant": variant_dir}.get(code, str(REPO))
    return env


def child(role: str, scenario: str, dsn: str, before: str, *extra: str) -> str:
    """Run one child to its end; returns its stderr (the worker's log: a
    warning there, a retried claim or write, explains a slow drain)."""
    argv = [sys.executable, __file__, "--role", role, "--scenario", scenario, "--dsn", dsn,
            *extra]
    done = subprocess.run(argv, env=code_env(scenario, before), cwd="/", text=True,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=600)
    if done.returncode:
        raise RuntimeError(f"{role} {scenario} exited {done.returncode}: {done.stderr[-2000:]}")
    return done.stderr


def prepare(dsn: str, scenario: str, jobs: int, rate: int) -> None:
    """(child) Migrate, declare nothing, add the jobs; limits go on the queue row."""
    from portqueue import PortQueue

    scenario = setup(scenario)[0]
    with PortQueue(dsn) as pq:
        pq.migrate()
        entries: list[dict[str, Any]] = [{"data": {"n": n}} for n in range(jobs)]
        if scenario == "partition50":
            entries = [{"data": {"n": n}, "partition_key": f"tenant:{n % KEYS}"}
                       for n in range(jobs)]
        for start in range(0, len(entries), 1000):
            pq.add_jobs(queue=QUEUE, jobs=entries[start:start + 1000])
        if scenario == "global100":
            pq.set_queue_limits(queue=QUEUE, global_concurrency=100)  # type: ignore[attr-defined]
        if scenario == "partition50":
            pq.set_queue_limits(queue=QUEUE, partition_concurrency=1)  # type: ignore[attr-defined]
        if scenario == "rate":
            pq.set_queue_limits(queue=QUEUE,  # type: ignore[attr-defined]
                                rate_limit={"limit": rate, "period_seconds": 1})
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE)")
        # The adds' WAL would otherwise bring the next checkpoint forward into
        # some drains and not others: each drain starts just after one.
        conn.execute("CHECKPOINT")


def work(dsn: str, jobs: int, concurrency: int) -> None:
    """(child) A worker until every job of the queue is finished."""
    from portqueue import AsyncPortQueue

    async def main() -> None:
        apq = AsyncPortQueue(dsn)

        async def handler(job: Any) -> None:
            return None

        apq.create_queue(queue=QUEUE, handler=handler, concurrency=concurrency)
        await apq.start(maintenance=False, scheduler=False)
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            while True:
                cursor = await conn.execute(
                    "SELECT count(*) FROM portqueue.job WHERE finished_at IS NULL")
                row = await cursor.fetchone()
                if row is not None and row[0] == 0:
                    break
                # The drain is timed on the database clock, so how often this
                # looks changes only when the worker stops; each look is a scan
                # of the queue (about 6 ms at 20,000 jobs), every 20 ms it took
                # a third of a core from the drain it measured.
                await asyncio.sleep(0.25)
        await apq.stop()
        await apq.aclose()
        # The worker's CPU, for the parent (its stderr): with the server's,
        # it tells a drain bound by the worker's one core from one bound by
        # the server or by waits.
        usage = resource.getrusage(resource.RUSAGE_SELF)
        sys.stderr.write(f"worker_cpu_seconds {usage.ru_utime + usage.ru_stime:.3f}\n")

    asyncio.run(main())


STATEMENTS = """
SELECT left(regexp_replace(s.query, '\\s+', ' ', 'g'), 80) AS query, s.calls, s.plans,
       round(s.mean_exec_time::numeric, 3) AS mean_exec_ms,
       round(s.mean_plan_time::numeric, 3) AS mean_plan_ms,
       round((s.total_exec_time + s.total_plan_time)::numeric, 1) AS total_ms, s.rows
FROM pg_stat_statements AS s JOIN pg_database AS d ON d.oid = s.dbid
WHERE d.datname = %s
ORDER BY s.total_exec_time + s.total_plan_time DESC LIMIT 12"""


def statements(dsn: str, reset: bool) -> list[dict[str, Any]]:
    """(--statements) The drain's statements by server time, from
    pg_stat_statements (reset before the worker starts)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        if reset:
            conn.execute("SELECT pg_stat_statements_reset()")
            return []
        cursor = conn.execute(STATEMENTS, [DATABASE])
        names = [column.name for column in cursor.description or []]
        return [{name: (float(v) if hasattr(v, "is_finite") else v)
                 for name, v in zip(names, row, strict=True)} for row in cursor]


def server_cpu(dsn: str) -> float | None:
    """The CPU seconds of the server's ended processes (the postmaster's
    children: each drain's backends end with its worker), when the server
    runs on this machine."""
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            (data,) = conn.execute("SHOW data_directory").fetchone() or ("",)
        pid = Path(data, "postmaster.pid").read_text().split()[0]
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError, psycopg.Error):
        return None


def checkpoints(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        (n,) = conn.execute("SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter"
                            ).fetchone() or (0,)
    return int(n)


def measure(dsn: str, scenario: str, jobs: int, rate: int, before: str,
            with_statements: bool = False) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DATABASE}")
    bench = server_dsn(dsn, DATABASE)
    n = rate * 5 if setup(scenario)[0] == "rate" else jobs
    child("prepare", scenario, bench, before, "--jobs", str(n), "--rate", str(rate))
    if with_statements:
        statements(dsn, reset=True)
    server_before, checkpoints_before = server_cpu(dsn), checkpoints(dsn)
    log = child("work", scenario, bench, before, "--jobs", str(n),
                "--concurrency", str(setup(scenario)[2]))
    server_after, checkpoints_after = server_cpu(dsn), checkpoints(dsn)
    drained = statements(dsn, reset=False) if with_statements else None
    with psycopg.connect(bench) as conn:
        first, last, done = conn.execute(
            "SELECT min(started_at), max(finished_at), count(*) FILTER "
            "(WHERE status = 'completed') FROM portqueue.job").fetchone() or (None, None, 0)
        starts = [row[0] for row in conn.execute(
            "SELECT extract(epoch FROM started_at) FROM portqueue.job ORDER BY started_at")]
        # Whether autovacuum ran on the job table during the drain (it takes a
        # core from the worker and its backends; counted in server_cpu_seconds).
        (vacuums,) = conn.execute(
            "SELECT autovacuum_count + autoanalyze_count FROM pg_stat_user_tables "
            "WHERE schemaname = 'portqueue' AND relname = 'job'").fetchone() or (None,)
    assert done == n, f"{scenario}: {done} of {n} completed"
    seconds = (last - first).total_seconds()
    # A claim stamps its jobs with its statement's clock: distinct started_at
    # are the claims that started jobs, and the gaps between them the time
    # the worker ran nothing new (the largest: a stall, if there was one).
    stamps = sorted({float(s) for s in starts})
    gaps = sorted(b - a for a, b in itertools.pairwise(stamps))
    result: dict[str, Any] = {
        "scenario": scenario, "jobs": n, "seconds": seconds, "rate": n / seconds,
        "claims": len(stamps), "jobs_per_claim": n / max(1, len(stamps)),
        "largest_gap": gaps[-1] if gaps else 0.0,
        "median_gap": statistics.median(gaps) if gaps else 0.0,
        # The worker's log, its last 20,000 characters (empty when all went well).
        "worker_log": log[-20000:], "autovacuums": vacuums,
        # Checkpoints that began during the drain (its full-page writes).
        "checkpoints": checkpoints_after - checkpoints_before}
    for line in log.splitlines():
        if line.startswith("worker_cpu_seconds "):
            result["worker_cpu_seconds"] = float(line.split()[1])
    if server_before is not None and server_after is not None:
        result["server_cpu_seconds"] = server_after - server_before
    if drained is not None:
        result["statements"] = drained
    if setup(scenario)[0] == "rate":
        # Starts after the first window, per second of the windows they span.
        later = [float(s) for s in starts if float(s) >= float(starts[0]) + 1]
        result["start_rate"] = len(later) / max(1.0, float(later[-1]) - float(starts[0]))
        result["limit"] = rate
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--rate", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--before", default="", help="a checkout of the base commit")
    parser.add_argument("--variant", default="", help="a checkout with one change left out")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--statements", action="store_true",
                        help="record each drain's statements (pg_stat_statements)")
    parser.add_argument("--role", choices=["measure", "prepare", "work"], default="measure")
    parser.add_argument("--scenario", default="")
    parser.add_argument("--concurrency", type=int, default=CONCURRENCY)
    args = parser.parse_args()
    if args.role == "prepare":
        return prepare(args.dsn, args.scenario, args.jobs, args.rate)
    if args.role == "work":
        return work(args.dsn, args.jobs, args.concurrency)
    chosen = args.scenarios.split(",")
    if any(setup(name)[1] == "before" for name in chosen) and not args.before:
        parser.error("--before DIR is needed for the 'before' scenario")
    if any(setup(name)[1] == "variant" for name in chosen) and not args.variant:
        parser.error("--variant DIR is needed for the 'variant_*' scenarios")
    code = f"{args.before}:{args.variant}"
    runs: list[dict[str, dict[str, Any]]] = []
    for run in range(args.runs):
        order = chosen[run % len(chosen):] + chosen[:run % len(chosen)]
        results = {}
        for scenario in order:
            results[scenario] = measure(args.dsn, scenario, args.jobs, args.rate, code,
                                        args.statements)
            got = results[scenario]
            print(f"run {run + 1} {scenario}: {got['rate']:,.0f} jobs/s, "
                  f"{got['jobs_per_claim']:.0f} jobs a claim, largest gap "
                  f"{got['largest_gap'] * 1000:.0f} ms, {got['checkpoints']} checkpoint(s)"
                  + (f", {len(got['worker_log'].splitlines())} log lines"
                     if got["worker_log"] else "")
                  + (f", start rate {results[scenario]['start_rate']:.1f}/s"
                     if setup(scenario)[0] == "rate" else ""), flush=True)
        runs.append(results)
    ratios: dict[str, list[float]] = {}
    for results in runs:
        for name, (top, bottom) in {"unlimited/before": ("unlimited", "before"),
                                    "global100/unlimited": ("global100", "unlimited"),
                                    "partition50/unlimited": ("partition50", "unlimited"),
                                    "partition50/unlimited50": ("partition50", "unlimited50"),
                                    "before_global100/before": ("before_global100", "before"),
                                    "before_partition50/before": ("before_partition50",
                                                                  "before"),
                                    "global100/before_global100": ("global100",
                                                                   "before_global100"),
                                    "partition50/before_partition50": ("partition50",
                                                                       "before_partition50"),
                                    "global100/variant_global100": ("global100",
                                                                    "variant_global100"),
                                    "partition50/variant_partition50": ("partition50",
                                                                        "variant_partition50"),
                                    }.items():
            if top in results and bottom in results:
                ratios.setdefault(name, []).append(
                    results[top]["rate"] / results[bottom]["rate"])
    for name, values in ratios.items():
        print(f"{name}: median {statistics.median(values):.3f} "
              f"(runs: {', '.join(f'{v:.3f}' for v in values)})")
    for name in ("rate", "before_rate"):
        rates = [r[name]["start_rate"] for r in runs if name in r]
        if rates:
            print(f"{name}: limit {args.rate}/s, start rate median "
                  f"{statistics.median(rates):.1f}/s")
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = RESULTS / f"flow-control-{stamp}.json"
    path.write_text(json.dumps({"runs": runs, "ratios": ratios, "args": vars(args),
                                "measured_at": time.time()}, indent=2))
    print(f"raw figures: {path}")


if __name__ == "__main__":
    main()
