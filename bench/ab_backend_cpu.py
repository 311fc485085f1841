"""Backend CPU of portqueue's hot path on two schema revisions, interleaved.

    python bench/ab_backend_cpu.py --before 0006 --after head --rounds 8

On a loaded machine, wall-clock rates move by more than a schema change costs;
the server's CPU time for the same statements does not. For each revision this
makes a database (``ab_cpu_<rev>``), one sync client (one pooled connection)
and one in-process worker, then alternates, round by round, between them:

- ``single``: 300 ``add_job`` calls, the producer backend's CPU per add;
- ``bulk``: five ``add_jobs`` of 1,000, per job;
- ``drain``: 2,000 jobs added to a paused queue, then resumed; every backend
  of the database (the worker's sessions), per job, from resume to the last
  job finished.

CPU is read from ``/proc/<pid>/schedstat`` (the server must run on this
machine). Prints medians per revision and the after / before ratio per round.

``--before-without-indexes a,b`` drops those job indexes from the ``before``
database after migrating it, to weigh indexes of one revision against each
other (``--before head --after head --before-without-indexes …``).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from portqueue import PauseMode, PortQueue
from portqueue.migrate import migrate

ADDS, BULK, BULK_CALLS, DRAIN = 300, 1_000, 5, 2_000


def backend_cpu_ns(admin: psycopg.Connection[Any], database: str, skip: int) -> int:
    pids = [pid for (pid,) in admin.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> %s",
        [database, skip]).fetchall()]
    total = 0
    for pid in pids:
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            total += int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
    return total


class Variant:
    def __init__(self, dsn: str, admin: psycopg.Connection[Any], revision: str,
                 label: str, without_indexes: tuple[str, ...] = ()) -> None:
        self.database = f"ab_cpu_{label}"
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            sql.Identifier(self.database)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.database)))
        self.dsn = psycopg.conninfo.make_conninfo(dsn, dbname=self.database)
        migrate(self.dsn, revision=revision)
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            for index in without_indexes:
                conn.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier("portqueue", index)))
        self.admin = admin
        self.revision = label
        self.pq = PortQueue(self.dsn, pool_min_size=1, pool_max_size=1)
        self.finished = 0

        @self.pq.handler("drain", concurrency=100)
        def handler(job: Any) -> None:
            return None

        self.pq.start(maintenance=False, scheduler=False)
        self.pq.add_job(queue="adds", data={"warm": True})
        # Counts finished drain jobs; its own CPU is left out.
        self.observer = psycopg.connect(self.dsn, autocommit=True)

    def cpu(self) -> int:
        return backend_cpu_ns(self.admin, self.database, self.observer.info.backend_pid)

    def completed(self) -> int:
        row = self.observer.execute("SELECT count(*) FROM portqueue.job "
                                    "WHERE queue = 'drain' AND status = 'completed'").fetchone()
        return int(row[0]) if row else 0

    def single(self) -> float:
        before = self.cpu()
        for n in range(ADDS):
            self.pq.add_job(queue="adds", data={"seq": n})
        return (self.cpu() - before) / ADDS / 1000

    def bulk(self) -> float:
        before = self.cpu()
        for _ in range(BULK_CALLS):
            self.pq.add_jobs(queue="adds", jobs=[{"data": {"seq": n}} for n in range(BULK)])
        return (self.cpu() - before) / (BULK * BULK_CALLS) / 1000

    def drain(self) -> float:
        self.pq.pause_queue(queue="drain", mode=PauseMode.PROCESSING)
        self.pq.add_jobs(queue="drain", jobs=[{"data": {"seq": n}} for n in range(DRAIN)])
        before = self.cpu()
        self.pq.resume_queue(queue="drain")
        deadline = time.monotonic() + 300
        while self.completed() < self.finished + DRAIN:
            if time.monotonic() > deadline:
                raise RuntimeError("the drain did not finish in 300 s")
            time.sleep(0.02)
        self.finished += DRAIN
        return (self.cpu() - before) / DRAIN / 1000

    def close(self) -> None:
        self.pq.stop()
        self.pq.close()
        self.observer.close()
        self.admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            sql.Identifier(self.database)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--before", default="0006")
    parser.add_argument("--after", default="head")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--before-without-indexes", default="",
                        help="comma-separated job indexes to drop from the before database")
    args = parser.parse_args()
    dropped = tuple(i for i in args.before_without_indexes.split(",") if i)
    if args.before == args.after:
        args.before, args.after = f"{args.before}_before", f"{args.after}_after"
    with psycopg.connect(args.dsn, autocommit=True) as admin:
        variants = [Variant(args.dsn, admin, args.before.removesuffix("_before"), args.before,
                            dropped),
                    Variant(args.dsn, admin, args.after.removesuffix("_after"), args.after)]
        results: dict[str, dict[str, list[float]]] = {
            v.revision: {"single": [], "bulk": [], "drain": []} for v in variants}
        try:
            for round_ in range(args.rounds):
                order = variants if round_ % 2 == 0 else variants[::-1]
                for scenario in ("single", "bulk", "drain"):
                    for variant in order:
                        value = getattr(variant, scenario)()
                        results[variant.revision][scenario].append(value)
                print(f"round {round_ + 1}: " + ", ".join(
                    f"{s} {results[args.before][s][-1]:.1f}/{results[args.after][s][-1]:.1f}"
                    for s in ("single", "bulk", "drain")), flush=True)
        finally:
            for variant in variants:
                variant.close()
    print(f"\nbackend CPU, µs per job, median (min-max) over {args.rounds} rounds:")
    for scenario in ("single", "bulk", "drain"):
        before, after = results[args.before][scenario], results[args.after][scenario]
        ratios = [a / b for a, b in zip(after, before, strict=True)]
        print(f"  {scenario:<6} {args.before}: {statistics.median(before):.1f} "
              f"({min(before):.1f}-{max(before):.1f})  {args.after}: "
              f"{statistics.median(after):.1f} ({min(after):.1f}-{max(after):.1f})  "
              f"{args.after}/{args.before}: {statistics.median(ratios):.3f} "
              f"({min(ratios):.3f}-{max(ratios):.3f})")


if __name__ == "__main__":
    main()
