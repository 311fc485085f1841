"""One drain for bench/workflows.py, in a process of its own: run a worker on
SCHEMA's ``drain`` queue (async no-op handler, concurrency 100) until no job
of the schema is unfinished; print the seconds from the first handler call to
then, and the CPU time the database's backends spent meanwhile (read from
/proc/<pid>/schedstat: the server must run on this machine), which moves far
less than wall time on a shared machine. The session that polls for the end
is left out of that sum: its count of unfinished jobs reads the whole table
a hundred times a second, so counting it made a drain's CPU follow its wall
time (the machine's load) more than its work. Which portqueue it runs is the
caller's PYTHONPATH (a checkout's root)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from portqueue import AsyncPortQueue


async def backend_cpu_ns(conn: psycopg.AsyncConnection[Any]) -> dict[int, int]:
    """CPU time of each backend of this database but this session's, by pid."""
    rows = await (await conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
        "AND pid <> pg_backend_pid()")).fetchall()
    times = {}
    for (pid,) in rows:
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            times[pid] = int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
    return times


def spent(before: dict[int, int], after: dict[int, int]) -> int:
    """The CPU the backends alive at the end spent since ``before``. A backend
    gone by then (a session of the previous drain still exiting at the start)
    counts nothing: subtracting the time it had spent before this drain, as a
    difference of sums did, made a drain that followed another look cheaper."""
    return sum(ns - before.get(pid, 0) for pid, ns in after.items())


async def main(dsn: str, schema: str) -> None:
    apq = AsyncPortQueue(dsn, schema=schema)
    first: list[float] = []

    @apq.handler("drain", concurrency=100)
    async def handle(job: Any) -> None:
        if not first:
            first.append(time.perf_counter())

    unfinished = sql.SQL("SELECT count(*) FROM {} WHERE finished_at IS NULL").format(
        sql.Identifier(schema, "job"))
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cpu_before = await backend_cpu_ns(conn)
        await apq.start(maintenance=False, scheduler=False)
        try:
            while True:
                row = await (await conn.execute(unfinished)).fetchone()
                if first and row is not None and row[0] == 0:
                    break
                await asyncio.sleep(0.01)
            elapsed = time.perf_counter() - first[0]
            cpu = spent(cpu_before, await backend_cpu_ns(conn))
        finally:
            await apq.stop()
            await apq.aclose()
    print(f"{elapsed:.4f} {cpu}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
