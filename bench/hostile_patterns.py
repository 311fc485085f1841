"""A drain of plain jobs behind patterned jobs no worker matches (issue 16.2).

    python bench/hostile_patterns.py [--dsn DSN] [--scenario slow|many|none] [--runs 3]

- ``slow``: 40 distinct patterns such as ``(a{0,255}){39}b0`` (0.2-0.3 s each
  to compile; PostgreSQL caches 32 per session), one job each at priority 5,
  then 100 plain jobs at priority 0;
- ``many``: 100,000 jobs with one cheap pattern no worker matches
  (``^gpu-``) at priority 1, then 1,000 plain jobs;
- ``none``: the 1,000 plain jobs alone (the baseline for ``many``).

The patterned jobs are written by SQL, as any route past the producer's check
would write them. One worker (instance key ``cpu-host``, concurrency 10, a
no-op async handler) then drains the plain jobs; the figure is the time from
its start to the last plain job finished, capped at 60 s (then the count
finished is reported). Runs with whatever portqueue is on PYTHONPATH, so the
same script measures before and after a change.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import psycopg

from portqueue import PortQueue
from portqueue.migrate import migrate

DATABASE = "bench_patterns"
QUEUE = "render"
CAP_SECONDS = 60.0
SCENARIOS: dict[str, tuple[list[tuple[str, int, int]], int]] = {
    # (pattern, priority, count) per patterned set, then the plain jobs
    "slow": ([(f"(a{{0,255}}){{39}}b{n}", 5, 1) for n in range(40)], 100),
    "many": ([("^gpu-", 1, 100_000)], 1_000),
    "none": ([], 1_000),
}


def database_dsn(dsn: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DATABASE}")
    return psycopg.conninfo.make_conninfo(dsn, dbname=DATABASE)


def load(dsn: str, scenario: str) -> None:
    patterned, plain = SCENARIOS[scenario]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE portqueue.job, portqueue.queue, portqueue.worker")
        conn.execute("INSERT INTO portqueue.queue (name) VALUES (%s)", [QUEUE])
        for pattern, priority, count in patterned:
            conn.execute(
                "INSERT INTO portqueue.job (id, queue, data, priority,"
                " preferred_instance_key_pattern)"
                " SELECT gen_random_uuid(), %s, '{}', %s, %s FROM generate_series(1, %s)",
                [QUEUE, priority, pattern, count])
        conn.execute(
            "INSERT INTO portqueue.job (id, queue, data)"
            " SELECT gen_random_uuid(), %s, '{}' FROM generate_series(1, %s)", [QUEUE, plain])
        conn.execute("VACUUM (ANALYZE) portqueue.job")


def plain_left(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        "SELECT count(*) FROM portqueue.job WHERE queue = %s"
        " AND preferred_instance_key_pattern IS NULL AND finished_at IS NULL", [QUEUE]).fetchone()
    return int(row[0]) if row else 0


def drain(dsn: str, scenario: str) -> tuple[float, int]:
    """Seconds to drain the plain jobs (capped), and how many finished."""
    load(dsn, scenario)
    plain = SCENARIOS[scenario][1]
    pq = PortQueue(dsn, instance_key="cpu-host")

    async def handler(job: Any) -> None:
        return None

    pq.create_queue(queue=QUEUE, handler=handler, concurrency=10)
    with psycopg.connect(dsn, autocommit=True) as conn:
        started = time.monotonic()
        pq.start(maintenance=False, scheduler=False, poll_interval=0.1)
        try:
            while (left := plain_left(conn)) and time.monotonic() - started < CAP_SECONDS:
                time.sleep(0.05)
            elapsed = time.monotonic() - started
        finally:
            pq.stop(abort=True)
            pq.close()
    return elapsed, plain - left


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), default="slow")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    dsn = database_dsn(args.dsn)
    migrate(dsn, schema="portqueue")
    results = [drain(dsn, args.scenario) for _ in range(args.runs)]
    for seconds, done in results:
        print(f"{args.scenario}: {done}/{SCENARIOS[args.scenario][1]} plain jobs "
              f"in {seconds:.1f} s")
    print(f"{args.scenario}: median {statistics.median(s for s, _ in results):.1f} s")
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")


if __name__ == "__main__":
    main()
