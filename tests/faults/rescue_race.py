"""A rescuer process for the rescuer race: ``python -m tests.faults.rescue_race MODE BARRIER``.

It waits at the barrier (a shared advisory lock the test holds exclusively, so
every process starts the moment the test lets go), then rescues lapsed leases
until none is left, and prints ``RESULT {json}``: jobs it rescued, passes, and
every database error it met (a deadlock would be one). Exit 1 if it met any.

MODE ``service``: ``Rescuer.run_once()``, the code every worker runs, with
small batches so the five processes take turns on the advisory lock.
MODE ``raw``: the ``rescue_lapsed`` statement itself, without that lock, so
the guarded UPDATE alone must make each rescue happen once.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any

import psycopg
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from portqueue import PortQueue
from portqueue.driver import execute_sync
from portqueue.maintenance.rescuer import Rescuer

BATCH = 20
DEADLINE_SECONDS = 60.0


def lapsed_left(conn: psycopg.Connection[Any], schema: str) -> int:
    row = conn.execute(sql.SQL(
        "SELECT count(*) FROM {} WHERE status = 'active' AND lease_expires_at < now()").format(
            sql.Identifier(schema, "job"))).fetchone()
    return int(row[0]) if row else 0


async def service(dsn: str, settings: Any, check: psycopg.Connection[Any],
                  result: dict[str, Any]) -> None:
    async with AsyncConnectionPool(dsn, min_size=1, max_size=2, open=False) as pool:
        service = Rescuer(settings, pool, batch_size=BATCH)
        while lapsed_left(check, settings.schema) and time.monotonic() < result["deadline"]:
            result["passes"] += 1
            try:
                result["rescued"] += await service.run_once()
            except psycopg.Error as exc:
                result["errors"].append(f"{type(exc).__name__}: {exc}")


def raw(dsn: str, settings: Any, check: psycopg.Connection[Any],
        result: dict[str, Any]) -> None:
    with psycopg.connect(dsn) as conn:
        while lapsed_left(check, settings.schema) and time.monotonic() < result["deadline"]:
            result["passes"] += 1
            try:
                with conn.transaction():
                    rows = execute_sync(conn, settings.queries("rescue_lapsed", limit=BATCH))
                result["rescued"] += len(rows)
            except psycopg.Error as exc:
                result["errors"].append(f"{type(exc).__name__}: {exc}")


def main() -> int:
    mode, barrier = sys.argv[1], int(sys.argv[2])
    dsn, schema = os.environ["PORTQUEUE_DSN"], os.environ["PORTQUEUE_SCHEMA"]
    settings = PortQueue(dsn, schema=schema)._settings
    result: dict[str, Any] = {"pid": os.getpid(), "mode": mode, "rescued": 0, "passes": 0,
                              "errors": [], "deadline": time.monotonic() + DEADLINE_SECONDS}
    with psycopg.connect(dsn, autocommit=True) as check:
        check.execute("SELECT pg_advisory_lock_shared(%s)", [barrier])
        check.execute("SELECT pg_advisory_unlock_shared(%s)", [barrier])
        if mode == "service":
            asyncio.run(service(dsn, settings, check, result))
        else:
            raw(dsn, settings, check, result)
    del result["deadline"]
    print("RESULT " + json.dumps(result), flush=True)
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
