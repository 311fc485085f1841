"""Where a portqueue drain's time goes (session drain, 2026-12-03).

Run with the bench venv's python and PYTHONPATH=<side>:
    python profile.py --dsn postgresql://postgres@127.0.0.1:5474/postgres --jobs 20000 \
        [--py-spy out]

A fresh database, N jobs pre-added as bench/run.py does, then the bench's own
worker child (bench/child.py, concurrency 100). Over the drain (first handler
call to the last job finished): pg_stat_statements per statement (calls, exec and
plan ms, per job), commits and WAL per job, the worker's CPU and each backend's
CPU (/proc), and pg_stat_activity wait events sampled every 2 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

BENCH = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(BENCH))
import systems  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--py-spy", dest="py_spy", default=None)
    parser.add_argument("--sample-ms", type=float, default=2.0)
    args = parser.parse_args()
    name = "drainprof"
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    dsn = make_conninfo(args.dsn, dbname=name)
    systems.get("portqueue").setup(dsn)
    settings = {"concurrency": args.concurrency, "client": "sync"}

    async def add() -> None:
        producer = await systems.get("portqueue").producer(dsn, settings)
        for start in range(0, args.jobs, 1000):
            await producer.add_many([{"seq": i} for i in range(start, min(start + 1000,
                                                                            args.jobs))])
        await producer.close()

    asyncio.run(add())
    admin = psycopg.connect(dsn, autocommit=True)
    admin.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    admin.execute("ANALYZE")
    admin.execute("CHECKPOINT")
    admin.execute("SELECT pg_stat_statements_reset()")
    admin.execute("SELECT pg_stat_reset_shared('wal')")

    def snapshot() -> dict[str, Any]:
        row = admin.execute(
            "SELECT xact_commit, pg_current_wal_lsn()::text, "
            "(SELECT wal_records FROM pg_stat_wal), (SELECT wal_fpi FROM pg_stat_wal), "
            "(SELECT wal_write FROM pg_stat_wal), (SELECT wal_sync FROM pg_stat_wal) "
            "FROM pg_stat_database WHERE datname = %s", (name,)).fetchone()
        assert row is not None
        return dict(zip(["commits", "lsn", "wal_records", "wal_fpi", "wal_write", "wal_sync"],
                        row, strict=True))

    child = subprocess.Popen(
        [sys.executable, str(BENCH / "child.py"), "worker", "portqueue", dsn,
         "--settings", json.dumps(settings), "--report-every", "1000"],
        stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    events: list[dict[str, Any]] = []
    first = threading.Event()

    def read() -> None:
        assert child.stdout is not None
        for line in child.stdout:
            if line.startswith("@"):
                event = json.loads(line[1:])
                events.append(event)
                if event["ev"] == "first":
                    first.set()

    threading.Thread(target=read, daemon=True).start()
    spy = None
    if args.py_spy:
        spy = subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record",
                                "--pid", str(child.pid), "--rate", "250", "--format", "raw",
                                "--nonblocking", "-o", args.py_spy, "--duration", "30"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sampler = psycopg.connect(dsn, autocommit=True)
    pids: dict[int, str] = {}
    waits: Counter[tuple[str, str]] = Counter()
    states: Counter[tuple[str, str]] = Counter()
    stop = threading.Event()
    samples = [0]

    def sample() -> None:
        me = sampler.info.backend_pid
        while not stop.is_set():
            for pid, app, state, wtype, wevent in sampler.execute(
                    "SELECT pid, application_name, state, wait_event_type, wait_event "
                    "FROM pg_stat_activity WHERE datname = %s AND pid <> %s",
                    (name, me)).fetchall():
                role = app.rsplit(":", 1)[-1] if app else "?"
                pids[pid] = role
                states[(role, state or "?")] += 1
                if state == "active":
                    waits[(role, f"{wtype}:{wevent}" if wtype else "CPU")] += 1
            samples[0] += 1
            time.sleep(args.sample_ms / 1000)

    # Backends of the worker exist once it is ready: learn them before the drain.
    first.wait(60)
    t_first = next(e["ts"] for e in events if e["ev"] == "first")
    before = snapshot()
    cpu0_child = cpu_seconds(child.pid)
    for pid, in admin.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s",
                              (name,)).fetchall():
        pids.setdefault(pid, "?")
    cpu0 = {pid: cpu_seconds(pid) for pid in pids}
    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    # As bench/run.py: the handlers' reports until the last thousand, then the table.
    while not any(e["ev"] == "progress" and e["n"] >= args.jobs - 1000 for e in events):
        time.sleep(0.005)
    while admin.execute("SELECT count(*) FROM portqueue.job WHERE status IN "
                        "('pending', 'active')").fetchone()[0] > 0:  # type: ignore[index]
        time.sleep(0.01)
    t_end = time.time()
    stop.set()
    thread.join()
    cpu1_child = cpu_seconds(child.pid)
    cpu1 = {pid: cpu_seconds(pid) for pid in pids}
    after = snapshot()
    n = args.jobs
    seconds = t_end - t_first
    stmts = admin.execute(
        "SELECT calls, total_exec_time, total_plan_time, plans, rows, wal_bytes, "
        "left(regexp_replace(query, '\\s+', ' ', 'g'), 70) FROM pg_stat_statements "
        "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = %s) "
        "ORDER BY total_exec_time DESC LIMIT 12", (name,)).fetchall()
    wal = admin.execute("SELECT pg_wal_lsn_diff(%s, %s)",
                        (after["lsn"], before["lsn"])).fetchone()[0]  # type: ignore[index]
    child.terminate()
    child.wait(30)
    if spy is not None:
        spy.wait(60)
    out: dict[str, Any] = {
        "jobs": n, "seconds": round(seconds, 3), "rate": round(n / seconds),
        "worker_cpu_s": round(cpu1_child - cpu0_child, 3),
        "worker_cpu_us_per_job": round(1e6 * (cpu1_child - cpu0_child) / n, 1),
        "commits_per_job": round((after["commits"] - before["commits"]) / n, 4),
        "wal_bytes_per_job": round(float(wal) / n),
        "wal_write": after["wal_write"] - before["wal_write"],
        "wal_sync": after["wal_sync"] - before["wal_sync"],
        "samples": samples[0],
    }
    by_role: Counter[str] = Counter()
    for pid, c1 in cpu1.items():
        by_role[pids.get(pid, "?")] += c1 - cpu0.get(pid, 0.0)
    out["backend_cpu_us_per_job"] = {r: round(1e6 * s / n, 1) for r, s in by_role.items()}
    out["statements"] = [
        {"calls": c, "per_call_ms": round(e / c, 3), "exec_us_per_job": round(1000 * e / n, 1),
         "plan_us_per_job": round(1000 * p / n, 1), "plans": pl, "rows": r,
         "wal_bytes_per_job": round(float(w) / n), "query": q}
        for c, e, p, pl, r, w, q in stmts if c]
    out["waits"] = {f"{r} {w}": v for (r, w), v in waits.most_common(20)}
    out["states"] = {f"{r} {s}": v for (r, s), v in states.most_common(20)}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
