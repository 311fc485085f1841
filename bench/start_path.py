"""Where an idle worker's start latency goes: the path from an add's commit to
its handler's first line, split at each hop, and the claim's server-side cost.

    python bench/start_path.py --dsn postgresql://postgres@127.0.0.1:5473/postgres

A fresh database; one in-process worker (one queue, concurrency 100, as
bench/run.py's latency scenario); a producer in another process adding one
job every 1/rate s and noting when each add returned (its commit). The
worker's hops are timed by wrapping, in this process only, the functions at
each hop's end (nothing in portqueue is changed):

- ``readable``: the listener's socket turned readable (the NOTIFY arrived);
- ``heard``: the notification was parsed and handed to ``Demand``;
- ``take``: the fetcher woke and took the queue to claim;
- ``sent`` / ``back``: the claim statement went out, and its rows came back;
- ``handler``: the handler's first line.

Jobs are 1/rate apart and each is claimed alone, so each add's hops follow it
in order; a job whose cycle is not one wake-up, one claim of one row, is left
out (and counted). Clocks: ``time.time()`` in both processes (one machine).

Server side (``pg_stat_statements``, with ``track_planning`` on for the run
when the cluster allows ``ALTER SYSTEM``): the claim's calls, plans and mean
plan and execution time, and the fetcher session's prepared statements
(``pg_prepared_statements``: generic and custom plans of each).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

QUEUE = "bench"
HOPS = ["readable", "heard", "take", "sent", "back", "handler"]


def produce(dsn: str, n: int, rate: float) -> None:
    from portqueue import PortQueue

    sent = []
    with PortQueue(dsn) as client:
        for _ in range(3):  # warm: the pool's connection, prepared statements
            client.add_job(queue=QUEUE, data={"seq": -1})
            time.sleep(0.05)
        t0 = time.time() + 0.2
        for i in range(n):
            delay = t0 + i / rate - time.time()
            if delay > 0:
                time.sleep(delay)
            before = time.time()
            client.add_job(queue=QUEUE, data={"seq": i})
            sent.append((before, time.time()))
    print(json.dumps(sent))


class Trace:
    """The hops of the cycle in progress; one cycle per notification."""

    def __init__(self) -> None:
        self.cycles: list[dict[str, Any]] = []
        self.current: dict[str, Any] | None = None

    def mark(self, hop: str, **extra: Any) -> None:
        now = time.time()
        if hop == "readable":
            self.current = {"readable": now}
            self.cycles.append(self.current)
            return
        if self.current is not None and hop not in self.current:
            self.current[hop] = now
            self.current.update(extra)
        elif self.current is not None:
            self.current["repeated"] = True


def instrument(trace: Trace) -> None:
    from portqueue.driver import fetch_async
    from portqueue.worker import demand, fetcher, listener

    readable = listener.readable

    async def timed_readable(conn: Any, seconds: float) -> None:
        await readable(conn, seconds)
        trace.mark("readable")

    listener.readable = timed_readable

    heard = listener.Listener._heard

    def timed_heard(self: Any, notify: Any) -> None:
        trace.mark("heard")
        heard(self, notify)

    listener.Listener._heard = timed_heard  # type: ignore[method-assign]

    take = demand.Demand.take

    def timed_take(self: Any) -> dict[str, int]:
        asked = take(self)
        if asked:
            trace.mark("take")
        return asked

    demand.Demand.take = timed_take  # type: ignore[method-assign]

    fetch = fetch_async

    async def timed_fetch(conn: Any, query: Any, row_factory: Any) -> Any:
        trace.mark("sent")
        rows = await fetch(conn, query, row_factory)
        trace.mark("back", rows=len(rows))
        return rows

    fetcher.fetch_async = timed_fetch  # type: ignore[attr-defined]


async def work(dsn: str, n: int, rate: float, trace: Trace) -> tuple[list[Any], dict[int, float],
                                                                     list[Any]]:
    from portqueue import AsyncPortQueue

    started: dict[int, float] = {}
    client = AsyncPortQueue(dsn)
    seq_of: dict[int, int] = {}

    @client.handler(QUEUE, concurrency=100)
    async def handle(job: Any) -> None:
        now = time.time()
        seq = job.data["seq"]
        if seq >= 0:
            started[seq] = now
            trace.mark("handler", seq=seq)
            seq_of[id(trace.current)] = seq

    await client.start()
    try:
        await asyncio.sleep(0.5)
        producer = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--produce", "--dsn", dsn, "--n", str(n),
            "--rate", str(rate), stdout=subprocess.PIPE)
        out, _ = await producer.communicate()
        sent = json.loads(out)
        deadline = time.monotonic() + 10
        while len(started) < n and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        worker = client._host.worker  # type: ignore[union-attr]
        async with worker.connections.claims.use() as conn:
            cur = await conn.execute(
                "SELECT left(statement, 40), generic_plans, custom_plans "
                "FROM pg_prepared_statements ORDER BY 1")
            prepared = await cur.fetchall()
    finally:
        await client.stop()
        await client.aclose()
    return sent, started, prepared


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))], 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--produce", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.produce:
        produce(args.dsn, args.n, args.rate)
        return

    from portqueue.migrate import migrate

    name = f"start_path_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(args.dsn, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
        try:
            admin.execute("ALTER SYSTEM SET pg_stat_statements.track_planning = on")
            admin.execute("SELECT pg_reload_conf()")
        except psycopg.Error:
            pass
    dsn = psycopg.conninfo.make_conninfo(args.dsn, dbname=name)
    migrate(dsn)
    stats = ("SELECT calls, plans, round(mean_plan_time::numeric, 3), "
             "round(mean_exec_time::numeric, 3), left(regexp_replace(query, '\\s+', ' ', 'g'), 50) "
             "FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid "
             "WHERE d.datname = %s ORDER BY total_exec_time + total_plan_time DESC LIMIT 8")
    with psycopg.connect(args.dsn, autocommit=True) as admin:
        admin.execute("SELECT pg_stat_statements_reset()")
    trace = Trace()
    instrument(trace)
    sent, started, prepared = asyncio.run(work(dsn, args.n, args.rate, trace))
    with psycopg.connect(args.dsn, autocommit=True) as admin:
        statements = admin.execute(stats, [name]).fetchall()
        admin.execute("ALTER SYSTEM RESET pg_stat_statements.track_planning")
        admin.execute("SELECT pg_reload_conf()")
        admin.execute(f"DROP DATABASE {name} WITH (FORCE)")

    steps = list(itertools.pairwise(["commit", *HOPS]))
    hops: dict[str, list[float]] = {f"{a}->{b}": [] for a, b in steps}
    total: list[float] = []
    left_out = 0
    for cycle in trace.cycles:
        seq = cycle.get("seq")
        if (seq is None or cycle.get("repeated") or cycle.get("rows") != 1
                or not all(hop in cycle for hop in HOPS)):
            left_out += 1
            continue
        commit = sent[seq][1]
        points = [commit, *(cycle[hop] for hop in HOPS)]
        for (a, b), (ta, tb) in zip(steps, itertools.pairwise(points), strict=True):
            hops[f"{a}->{b}"].append(1000 * (tb - ta))
        total.append(1000 * (cycle["handler"] - commit))
    all_jobs = [1000 * (started[i] - sent[i][1]) for i in started]
    report = {
        "n": args.n, "started": len(started), "cycles_used": len(total), "left_out": left_out,
        "p50_ms_all_jobs": pct(all_jobs, 50), "p95_ms_all_jobs": pct(all_jobs, 95),
        "hops_p50_ms": {hop: pct(values, 50) for hop, values in hops.items() if values},
        "hops_mean_ms": {hop: round(statistics.mean(values), 3)
                         for hop, values in hops.items() if values},
        "total_p50_ms": pct(total, 50) if total else None,
        "statements": [list(map(str, row)) for row in statements],
        "fetcher_prepared": [list(map(str, row)) for row in prepared],
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
