"""Would an index on finished jobs by status and finish time pay for itself?

    python bench/finished_index.py [--dsn DSN] [--rows 500000] [--runs 5]

The dashboard's failures list (every queue), its failure count and its
activity chart filter finished jobs by status and ``finished_at``; with no
index leading on those they read the whole job table. This loads ``--rows``
finished jobs (10 % failed, in 20 queues, finished over the last 30 days)
plus 1,000 jobs finished in the last hour, and times, without and then with
``CREATE INDEX … (status, finished_at) WHERE finished_at IS NOT NULL``:

- the three dashboard queries (``failure_page``, ``failure_count``,
  ``activity``: every queue, 60 buckets of 60 s), median of ``--runs``;
- what the index costs a worker: completing 20 batches of 1,000 active jobs
  with the real ``complete_jobs`` statement (median ms per batch).

Writes bench/results/finished-index-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from portqueue import PortQueue
from portqueue.queries import queries_for

SCHEMA = "bench_finished_index"
RESULTS = Path(__file__).resolve().parent / "results"
INDEX = "job_status_finished_idx"

LOAD = """
INSERT INTO {job} (id, queue, status, data, attempt, max_attempts, error,
                   created_at, start_after, started_at, finished_at)
SELECT gen_random_uuid(), 'q' || (g %% 20),
       (CASE WHEN g %% 10 = 0 THEN 'failed' ELSE 'completed' END)::{status}, '{{}}'::jsonb,
       1, 1, CASE WHEN g %% 10 = 0 THEN 'boom' END, t, t, t, t
FROM generate_series(1, %(rows)s) AS g,
     LATERAL (SELECT now() - make_interval(secs => CASE WHEN g <= 1000 THEN g * 3.6
                                                         ELSE random() * 30 * 86400 END)) AS f(t)
"""

ACTIVE = """
INSERT INTO {job} (id, queue, status, data, attempt, max_attempts, lease_token,
                   lease_expires_at, started_at)
SELECT gen_random_uuid(), 'q' || (g %% 20), 'active', '{{}}'::jsonb, 1, 1, g,
       now() + interval '1 hour', now()
FROM generate_series(1, %(rows)s) AS g
RETURNING id::text, lease_token
"""


def timed(conn: psycopg.Connection[Any], query: str, params: Mapping[str, Any]) -> float:
    started = time.perf_counter()
    conn.execute(query, params).fetchall()
    return (time.perf_counter() - started) * 1000


def measure(conn: psycopg.Connection[Any], runs: int) -> dict[str, float]:
    q = queries_for(SCHEMA)
    reads = {
        "failure_page": q("failure_page", queue=None, limit=20, offset=0),
        "failure_count": q("failure_count", queue=None),
        "activity": q("activity", queue=None, bucket_seconds=60, buckets=60),
    }
    out = {name: statistics.median(timed(conn, query.sql, query.params) for _ in range(runs))
           for name, query in reads.items()}
    job = sql.Identifier(SCHEMA, "job")
    batches = []
    for _ in range(20):
        rows = conn.execute(sql.SQL(ACTIVE).format(job=job), {"rows": 1000}).fetchall()
        jobs = json.dumps([{"id": i, "lease_token": t, "status": "completed", "output": None}
                           for i, t in rows])
        complete = q("complete_jobs", jobs=jobs)
        batches.append(timed(conn, complete.sql, complete.params))
    out["complete_batch_of_1000"] = statistics.median(batches)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA)))
    with PortQueue(args.dsn, schema=SCHEMA) as pq:
        pq.migrate()
    job = sql.Identifier(SCHEMA, "job")
    results: dict[str, Any] = {"rows": args.rows}
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        conn.execute("SET jit = off")
        with conn.transaction():
            conn.execute("SET LOCAL session_replication_role = replica")
            conn.execute(sql.SQL(LOAD).format(job=job, status=sql.Identifier(SCHEMA, "job_status")),
                         {"rows": args.rows})
        conn.execute(sql.SQL("VACUUM (ANALYZE) {}").format(job))
        results["without"] = measure(conn, args.runs)
        started = time.perf_counter()
        conn.execute(sql.SQL("CREATE INDEX {} ON {} (status, finished_at) "
                             "WHERE finished_at IS NOT NULL").format(sql.Identifier(INDEX), job))
        results["build_seconds"] = time.perf_counter() - started
        conn.execute(sql.SQL("VACUUM (ANALYZE) {}").format(job))
        results["with"] = measure(conn, args.runs)
        conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(SCHEMA)))
    for key in results["without"]:
        print(f"{key:24} without {results['without'][key]:9.2f} ms   "
              f"with {results['with'][key]:9.2f} ms")
    print(f"index build {results['build_seconds']:.2f} s over {args.rows:,} rows")
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    path = RESULTS / f"finished-index-{stamp}.json"
    path.write_text(json.dumps(results, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
