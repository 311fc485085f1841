"""The plain claim statement's own cost, before and after a change, in one run.

    python bench/claim_cost.py --dsn DSN --side base=/path/to/checkout \\
        --side branch=/path/to/other [--scenarios light,full,delayed,patterned] [--runs 7]

Each side is a checkout of portqueue: its own migrations build its database
(``claim_cost_<side>_<scenario>``, kept between runs, ``--fresh`` rebuilds),
and its own ``claim`` statement is timed by ``EXPLAIN (ANALYZE, TIMING OFF)``
in a transaction rolled back (so every repeat claims the same rows). The sides
alternate within each repeat; the figures are medians of execution and
planning time, with ``jit`` off and, with ``--jit``, on as well.

Scenarios (``QUEUES`` = 1,000 queues):

- ``light``: one slot in each of 1,000 queues, one of them holding 20 ready
  jobs (a worker of many queues under a light load);
- ``full``: 10 slots in each of 1,000 queues, each holding 20 ready jobs (a
  10,000-row claim);
- ``delayed``: 10 slots in one queue holding 1,000 ready jobs at priority 0
  behind 100,000 jobs due in a day at priority 10;
- ``patterned``: 10 slots in one queue holding 1,000 plain jobs behind
  100,000 jobs at priority 1 naming a pattern the worker refused (``^gpu-``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import uuid
from typing import Any

QUEUES = 1_000
SCENARIOS = ("light", "full", "delayed", "patterned")

LOADS = {
    "light": [
        "INSERT INTO portqueue.job (id, queue, data) SELECT gen_random_uuid(), 'q0', '{}' "
        "FROM generate_series(1, 20)"],
    "full": [
        "INSERT INTO portqueue.job (id, queue, data) SELECT gen_random_uuid(), 'q' || q, '{}' "
        "FROM generate_series(0, 999) AS q, generate_series(1, 20)"],
    "delayed": [
        "INSERT INTO portqueue.job (id, queue, data, priority, start_after) "
        "SELECT gen_random_uuid(), 'q0', '{}', 10, now() + interval '1 day' "
        "FROM generate_series(1, 100000)",
        "INSERT INTO portqueue.job (id, queue, data) SELECT gen_random_uuid(), 'q0', '{}' "
        "FROM generate_series(1, 1000)"],
    "patterned": [
        "INSERT INTO portqueue.job (id, queue, data, priority, preferred_instance_key_pattern) "
        "SELECT gen_random_uuid(), 'q0', '{}', 1, '^gpu-' FROM generate_series(1, 100000)",
        "INSERT INTO portqueue.job (id, queue, data) SELECT gen_random_uuid(), 'q0', '{}' "
        "FROM generate_series(1, 1000)"],
}


def claim_params(scenario: str) -> dict[str, Any]:
    if scenario in ("light", "full"):
        slots = 1 if scenario == "light" else 10
        return {"queues": [f"q{n}" for n in range(QUEUES)], "slots": [slots] * QUEUES,
                "lease_seconds": [60] * QUEUES, "matching_patterns": [],
                "refused_patterns": []}
    return {"queues": ["q0"], "slots": [10], "lease_seconds": [60], "matching_patterns": [],
            "refused_patterns": ["^gpu-"] if scenario == "patterned" else []}


def child(dsn: str, side: str, scenario: str, runs: int, jit: bool, fresh: bool) -> None:
    """Run inside one side's checkout (PYTHONPATH): build, then time its claim."""
    import psycopg

    from portqueue.migrate import migrate
    from portqueue.queries import queries_for

    database = f"claim_cost_{side}_{scenario}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                              [database]).fetchone()
        if fresh or not exists:
            conn.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {database}")
            exists = None
    target = psycopg.conninfo.make_conninfo(dsn, dbname=database)
    if not exists:
        migrate(target)
        with psycopg.connect(target, autocommit=True) as conn:
            with conn.transaction():
                conn.execute("SET LOCAL session_replication_role = replica")
                for statement in LOADS[scenario]:
                    conn.execute(statement)
            conn.execute("VACUUM (ANALYZE) portqueue.job")
    query = queries_for("portqueue")("claim", worker_id=str(uuid.uuid4()),
                                     **claim_params(scenario))
    out: dict[str, list[float]] = {"execution": [], "planning": [], "rows": []}
    with psycopg.connect(target, autocommit=True) as conn:
        conn.execute(f"SET jit = {'on' if jit else 'off'}")
        for _ in range(runs):
            with conn.transaction(force_rollback=True):
                (plan,) = conn.execute(
                    "EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) " + query.sql,
                    dict(query.params)).fetchone()
            out["execution"].append(plan[0]["Execution Time"])
            out["planning"].append(plan[0]["Planning Time"])
            out["rows"].append(plan[0]["Plan"]["Actual Rows"])
    print(json.dumps(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--side", action="append", required=True, metavar="NAME=CHECKOUT")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--runs", type=int, default=7, help="repeats, sides alternating")
    parser.add_argument("--per-repeat", type=int, default=3,
                        help="claims timed per side per repeat (their median counts)")
    parser.add_argument("--jit", action="store_true", help="also time with jit = on")
    parser.add_argument("--fresh", action="store_true", help="rebuild the databases")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        side, scenario, jit, fresh = args.child
        child(args.dsn, side, scenario, args.per_repeat, jit == "on", fresh == "yes")
        return
    sides = dict(s.split("=", 1) for s in args.side)
    modes = ["off", "on"] if args.jit else ["off"]
    results: dict[tuple[str, str, str], list[dict[str, float]]] = {}
    for scenario in args.scenarios.split(","):
        for repeat in range(args.runs):
            for jit in modes:
                for name, root in sides.items():
                    env = {**os.environ, "PYTHONPATH": root}
                    got = subprocess.run(
                        [sys.executable, os.path.abspath(__file__), "--dsn", args.dsn,
                         "--side", "x=y", "--child", name, scenario, jit,
                         "yes" if args.fresh and repeat == 0 and jit == modes[0] else "no"],
                        env=env, cwd=root, check=True, capture_output=True, text=True)
                    out = json.loads(got.stdout.strip().splitlines()[-1])
                    results.setdefault((scenario, jit, name), []).append(
                        {key: statistics.median(values) for key, values in out.items()})
    first = next(iter(sides))
    print("scenario  jit  side      exec ms (median)  plan ms  rows  exec / "
          f"{first} (median of per-repeat ratios)")
    for (scenario, jit, name), repeats in results.items():
        base = results[(scenario, jit, first)]
        ratios = [r["execution"] / b["execution"] for r, b in zip(repeats, base, strict=True)]
        print(f"{scenario:9} {jit:4} {name:9} "
              f"{statistics.median(r['execution'] for r in repeats):10.2f}"
              f"{statistics.median(r['planning'] for r in repeats):14.2f}"
              f"{statistics.median(r['rows'] for r in repeats):6.0f}"
              f"  {statistics.median(ratios):.2f} "
              f"[{', '.join(f'{x:.2f}' for x in ratios)}]")


if __name__ == "__main__":
    main()
