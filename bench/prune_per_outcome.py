"""What one pruner pass costs for each retention option (docs/retention.md).

    python bench/prune_per_outcome.py [--dsn DSN] [--rows 200000] [--runs 3]

For each scenario a fresh schema is loaded with ``--rows`` finished jobs in
one queue, half ``completed``, the other half ``failed``, ``cancelled`` and
``expired`` in turn, all finished 8 days ago (past the default 7 days) and
1 ms apart, then ``VACUUM (ANALYZE)``. The scenario sets its retention (on the
rows, the queue row or the pass's client defaults) and two passes of the
pruner run (``run_pass``'s pruner alone): the first deletes what retention
lets go (``delete``), the second has nothing left to do and measures what a
pass costs while the history stays (``idle``; after a ``VACUUM``, as autovacuum
would have run by then). Each scenario also EXPLAINs the
first batch's statement of each work item and reports the indexes it uses
and whether it scans the job table.

Medians of ``--runs`` runs, written to bench/results/prune-per-outcome-<time>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from portqueue import FOREVER, PortQueue
from portqueue.driver import execute_async
from portqueue.maintenance.pruner import Pruner
from portqueue.settings import client_settings
from portqueue.validation import DEFAULT_MAX_PAYLOAD_BYTES

SCHEMA = "bench_retention"
QUEUE = "history"
DAY = 86_400
RESULTS = Path(__file__).resolve().parent / "results"

# Triggers off (session_replication_role): the history is loaded, not added.
LOAD = """
INSERT INTO {job} (id, queue, status, data, attempt, max_attempts,
                   created_at, start_after, started_at, finished_at)
SELECT gen_random_uuid(), %(queue)s,
       (CASE WHEN g %% 2 = 0 THEN 'completed'
             ELSE (ARRAY['failed', 'cancelled', 'expired'])[1 + (g / 2) %% 3] END)::{status},
       '{{}}'::jsonb, 1, 1, t - interval '1 second', t - interval '1 second',
       t - interval '1 second', t
FROM generate_series(1, %(rows)s) AS g,
     LATERAL (SELECT now() - interval '8 days' - g * interval '1 millisecond' AS t) AS f
"""


@dataclass
class Scenario:
    name: str
    what: str
    job_sql: str | None = None      # SET clause for every loaded job
    queue_sql: str | None = None    # SET clause for the queue row
    defaults: dict[str, Any] = field(default_factory=dict)  # the pass's default_retention
    default_seconds: int = 7 * DAY


SCENARIOS = [
    Scenario("default", "client default 7 days: everything goes (the baseline)"),
    Scenario("queue_ttl", "queue retention_ttl_seconds 1 day: everything goes",
             queue_sql="retention_ttl_seconds = 86400"),
    Scenario("queue_per_outcome", "queue completed 1 day, failed FOREVER: completed go",
             queue_sql=f"retention_completed_ttl_seconds = 86400, "
                       f"retention_failed_ttl_seconds = {FOREVER}"),
    Scenario("client_per_outcome", "client default completed 1 day: completed go",
             defaults={"completed_ttl_seconds": DAY}, default_seconds=30 * DAY),
    Scenario("job_ttl", "every job retention_ttl_seconds 1 day: everything goes",
             job_sql="retention_ttl_seconds = 86400"),
    Scenario("job_per_outcome", "every job completed 1 day, failed 2 days: everything goes",
             job_sql="retention_completed_ttl_seconds = 86400, "
                     "retention_failed_ttl_seconds = 172800"),
    Scenario("forever", "queue ttl FOREVER: nothing goes",
             queue_sql=f"retention_ttl_seconds = {FOREVER}"),
    Scenario("job_forever", "every job ttl FOREVER: nothing goes",
             job_sql=f"retention_ttl_seconds = {FOREVER}"),
    Scenario("client_count_cap", "client keep_completed 1000, keep_failed 1000; ttl FOREVER",
             queue_sql=f"retention_ttl_seconds = {FOREVER}",
             defaults={"keep_completed": 1000, "keep_failed": 1000}),
]


def prepare(dsn: str, rows: int, scenario: Scenario) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA)))
    with PortQueue(dsn, schema=SCHEMA) as pq:
        pq.migrate()
        pq.add_job(queue=QUEUE, data={})  # the queue row the history belongs to
    job = sql.Identifier(SCHEMA, "job")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DELETE FROM {}").format(job))
        with conn.transaction():
            conn.execute("SET LOCAL session_replication_role = replica")
            conn.execute(sql.SQL(LOAD).format(job=job, status=sql.Identifier(SCHEMA, "job_status")),
                         {"queue": QUEUE, "rows": rows})
            if scenario.job_sql:
                conn.execute(sql.SQL("UPDATE {} SET ").format(job) + sql.SQL(scenario.job_sql))
        if scenario.queue_sql:
            conn.execute(sql.SQL("UPDATE {} SET ").format(sql.Identifier(SCHEMA, "queue"))
                         + sql.SQL(scenario.queue_sql))
        conn.execute(sql.SQL("VACUUM (ANALYZE) {}").format(job))


def indexes_of(plan: dict[str, Any]) -> tuple[set[str], bool]:
    names: set[str] = set()
    scans_table = False
    stack = [plan]
    while stack:
        node = stack.pop()
        if "Index Name" in node:
            names.add(node["Index Name"])
        if node.get("Node Type") == "Seq Scan" and node.get("Relation Name") == "job":
            scans_table = True
        stack.extend(node.get("Plans", []))
    return names, scans_table


async def passes(dsn: str, scenario: Scenario, explain: bool) -> dict[str, Any]:
    settings = client_settings(
        dsn, schema=SCHEMA, instance_key=None, max_payload_bytes=DEFAULT_MAX_PAYLOAD_BYTES,
        pool_min_size=1, pool_max_size=1, poll_only=True, application_name="bench",
        default_retention_seconds=scenario.default_seconds, default_retention=scenario.defaults)
    out: dict[str, Any] = {}
    async with AsyncConnectionPool(dsn, min_size=1, max_size=1, open=False) as pool:
        pruner = Pruner(settings, pool)
        if explain:
            out["plans"] = await explain_batches(pruner, pool)
        for phase in ("delete", "idle"):
            if phase == "idle":
                # As autovacuum would by then: the deleted rows' index entries
                # would otherwise be what the idle pass measures.
                async with pool.connection() as conn:
                    await conn.set_autocommit(True)
                    await conn.execute(sql.SQL("VACUUM (ANALYZE) {}").format(
                        sql.Identifier(SCHEMA, "job")))
            started = time.perf_counter()
            deleted = await pruner.run_once()
            out[phase] = {"seconds": time.perf_counter() - started, "deleted": deleted,
                          "batches": pruner.batches}
    return out


async def explain_batches(pruner: Pruner, pool: AsyncConnectionPool[Any]) -> list[Any]:
    """The indexes each work item's first batch uses (and prune_work's)."""
    defaults = pruner.settings.default_retention
    work_query = pruner.q(
        "prune_work", default_ttl_seconds=pruner.settings.default_retention_seconds,
        default_completed_ttl_seconds=defaults.completed_ttl_seconds,
        default_failed_ttl_seconds=defaults.failed_ttl_seconds,
        default_keep_completed=defaults.keep_completed,
        default_keep_failed=defaults.keep_failed, forever=FOREVER)
    plans = []
    async with pool.connection() as conn:
        await conn.execute("SET jit = off")
        work = await execute_async(conn, work_query)
        after = {"after_finished_at": None, "after_id": None}
        for name, query in [("prune_work", work_query),
                            *((item["rule"], pruner._batch(item, after)) for item in work)]:
            cur = await conn.execute(f"EXPLAIN (FORMAT JSON) {query.sql}", query.params)
            row = await cur.fetchone()
            assert row is not None
            used, scans = indexes_of(row[0][0]["Plan"])
            plans.append({"statement": name, "indexes": sorted(used), "seq_scan_job": scans})
    return plans


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", default="", help="comma-separated scenario names")
    args = parser.parse_args(argv)
    chosen = [s for s in SCENARIOS if not args.only or s.name in args.only.split(",")]
    results: dict[str, Any] = {}
    for scenario in chosen:
        runs = []
        for run in range(args.runs):
            prepare(args.dsn, args.rows, scenario)
            runs.append(asyncio.run(passes(args.dsn, scenario, explain=run == 0)))
        def median(phase: str, key: str, runs: list[dict[str, Any]] = runs) -> float:
            return float(statistics.median(r[phase][key] for r in runs))

        results[scenario.name] = {"what": scenario.what, "runs": runs,
                                  "plans": runs[0]["plans"]}
        plans = "; ".join(f"{p['statement']}: {','.join(p['indexes']) or '-'}"
                          f"{' SEQ SCAN' if p['seq_scan_job'] else ''}" for p in runs[0]["plans"])
        print(f"{scenario.name:20} deleted {int(median('delete', 'deleted')):>7,} in "
              f"{median('delete', 'seconds'):6.2f} s ({int(median('delete', 'batches'))} batches)"
              f" | idle pass {median('idle', 'seconds') * 1000:7.1f} ms | {plans}", flush=True)
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA)))
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    path = RESULTS / f"prune-per-outcome-{stamp}.json"
    path.write_text(json.dumps({"rows": args.rows, "runs": args.runs, "results": results},
                               indent=1, default=str))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
