"""What a claim costs with the pattern verdicts a worker sends (issue 16, the cap
in portqueue/worker/patterns.py: MAX_VERDICTS, MAX_VERDICT_BYTES).

    PYTHONPATH=. python bench/pattern_cap.py --dsn DSN [--jobs 10000] [--rounds 30]

In a fresh database ``bench_pattern_cap``: ``--jobs`` plain ready jobs in one
queue, then portqueue's own ``claim`` of 10 slots, with ``refused_patterns`` of
each size below (``matching_patterns`` empty), each claim rolled back. The sizes
interleave round by round (the order rotates); medians of the wall time and of
the backend's CPU time (``/proc/<pid>/schedstat``: the server must run on this
machine). The refused patterns match no job, so every claim claims the same 10.

- ``none``: no verdicts (every worker that meets no pattern);
- ``1000x10``: 1,000 patterns of 10 bytes (the old count cap, typical patterns);
- ``20000x10``: 20,000 of 10 bytes (the new count cap);
- ``1000x256``: 1,000 of 256 bytes (the byte cap, 256 KiB: the old worst case).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from pathlib import Path

import psycopg

from portqueue import PortQueue
from portqueue import worker_operations as ops
from portqueue.queries import queries_for

DATABASE = "bench_pattern_cap"
QUEUE = "plain"
SIZES = {
    "none": [],
    "1000x10": [f"^gpu-{n:04}$" for n in range(1_000)],
    "20000x10": [f"^g-{n:05}$" for n in range(20_000)],
    "1000x256": [f"^{n:04}" + "x" * 250 + "$" for n in range(1_000)],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DATABASE}")
    dsn = psycopg.conninfo.make_conninfo(args.dsn, dbname=DATABASE)
    with PortQueue(dsn) as pq:
        pq.migrate()
        for start in range(0, args.jobs, 1_000):
            pq.add_jobs(queue=QUEUE, jobs=[{"data": {"n": n}} for n in
                                           range(start, min(args.jobs, start + 1_000))])
    q = queries_for("portqueue")
    wall: dict[str, list[float]] = {name: [] for name in SIZES}
    cpu: dict[str, list[float]] = {name: [] for name in SIZES}
    names = list(SIZES)
    with psycopg.connect(dsn) as conn:
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
        schedstat = Path(f"/proc/{pid}/schedstat")
        for round_ in range(args.rounds):
            for name in names[round_ % len(names):] + names[:round_ % len(names)]:
                query = ops.claim(q, slots={QUEUE: 10}, lease_seconds={QUEUE: 60},
                                  matching_patterns=[], refused_patterns=SIZES[name],
                                  worker_id=str(uuid.uuid4()))
                on_cpu = int(schedstat.read_text().split()[0])
                began = time.perf_counter()
                rows = conn.execute(query.sql.encode(),  # type: ignore[call-overload]
                                    query.params).fetchall()
                wall[name].append(time.perf_counter() - began)
                cpu[name].append((int(schedstat.read_text().split()[0]) - on_cpu) / 1e9)
                conn.rollback()
                if len(rows) != 10:
                    raise RuntimeError(f"{name}: claimed {len(rows)}")
    result = {name: {"wall_ms": 1e3 * statistics.median(wall[name]),
                     "backend_cpu_ms": 1e3 * statistics.median(cpu[name])} for name in names}
    for name, figures in result.items():
        print(f"{name}: wall {figures['wall_ms']:.2f} ms, backend CPU "
              f"{figures['backend_cpu_ms']:.2f} ms (median of {args.rounds})")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
