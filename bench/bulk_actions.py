"""The dashboard's and CLI's bulk retry and cancel before and after issue 21.

    python bench/bulk_actions.py [--dsn DSN] [--jobs 1000] [--runs 5]

Each run loads ``--jobs`` failed jobs (for retry) or pending jobs (for
cancel) by SQL, then times one way of acting on all of their ids:

- ``loop``: one ``retry_job`` / ``cancel_job`` call per id, all in one
  transaction of the caller's (what the CLI did per page, and about what the
  dashboard did per submit, which committed each call on its own);
- ``bulk``: one ``retry_jobs`` / ``cancel_jobs`` call (one statement).

Prints the median of the runs for each, and their ratio. Runs with whatever
portqueue is on PYTHONPATH, in a database of its own that it drops first.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import psycopg

from portqueue import PortQueue
from portqueue.migrate import migrate
from portqueue.tx import from_psycopg

DATABASE = "bench_bulk_actions"
QUEUE = "bulk"


def database_dsn(dsn: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DATABASE}")
    return psycopg.conninfo.make_conninfo(dsn, dbname=DATABASE)


def load(dsn: str, jobs: int, status: str) -> list[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE portqueue.job, portqueue.queue")
        rows = conn.execute(
            "INSERT INTO portqueue.job (id, queue, data, status, finished_at)"
            " SELECT gen_random_uuid(), %s, '{}', %s::portqueue.job_status,"
            "        CASE WHEN %s = 'failed' THEN now() END"
            " FROM generate_series(1, %s) RETURNING id::text",
            [QUEUE, status, status, jobs]).fetchall()
        conn.execute("VACUUM (ANALYZE) portqueue.job")
    return [row[0] for row in rows]


def timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    options = parser.parse_args()
    dsn = database_dsn(options.dsn)
    migrate(dsn)
    with PortQueue(dsn) as pq, psycopg.connect(dsn) as conn:
        def loop(method: Callable[..., object], ids: list[str]) -> None:
            with conn.transaction():
                tx = from_psycopg(conn)
                for job_id in ids:
                    method(job_id=job_id, tx=tx)

        ways: dict[str, dict[str, tuple[str, Callable[[list[str]], object]]]] = {
            "retry": {"loop": ("failed", lambda ids: loop(pq.retry_job, ids)),
                      "bulk": ("failed", lambda ids: pq.retry_jobs(job_ids=ids))},
            "cancel": {"loop": ("pending", lambda ids: loop(pq.cancel_job, ids)),
                       "bulk": ("pending", lambda ids: pq.cancel_jobs(job_ids=ids))},
        }
        pq.get_queues()  # the pool open before the first timed call
        for verb, variants in ways.items():
            medians = {}
            for name, (status, act) in variants.items():
                seconds = []
                for _ in range(options.runs):
                    ids = load(dsn, options.jobs, status)
                    seconds.append(timed(lambda act=act, ids=ids: act(ids)))  # type: ignore[misc]
                medians[name] = statistics.median(seconds)
                print(f"{verb} {name}: median {medians[name] * 1000:.1f} ms over "
                      f"{options.runs} runs of {options.jobs} jobs "
                      f"({', '.join(f'{s * 1000:.0f}' for s in seconds)} ms)")
            print(f"{verb}: loop / bulk = {medians['loop'] / medians['bulk']:.1f}x")
    with psycopg.connect(options.dsn, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")


if __name__ == "__main__":
    main()
