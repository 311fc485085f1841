"""The lease rescuer: jobs whose lease lapsed go back to pending (or failed).

Runs in every worker; a transaction-scoped advisory lock lets one act at a
time. Bounded batches keyed on id, a statement timeout, jittered interval.
"""

from __future__ import annotations

import asyncio
import logging
import random
import zlib
from collections.abc import Callable

import psycopg
from psycopg_pool import AsyncConnectionPool

from portqueue.driver import execute_async
from portqueue.settings import Settings

log = logging.getLogger("portqueue.maintenance")

BATCH = 500
INTERVAL_SECONDS = 2.0
STATEMENT_TIMEOUT_MS = 30_000


def lock_key(schema: str, service: str) -> int:
    return zlib.crc32(f"portqueue.maintenance.{service}:{schema}".encode())


class Rescuer:
    name = "rescuer"

    def __init__(self, settings: Settings, pool: AsyncConnectionPool,
                 interval: float = INTERVAL_SECONDS) -> None:
        self.settings = settings
        self.pool = pool
        self.interval = interval
        self.q = settings.queries

    async def run(self, stopping: Callable[[], bool]) -> None:
        while not stopping():
            try:
                rescued = await self.run_once()
                if rescued:
                    log.info("rescued %d job(s) whose lease lapsed", rescued)
            except psycopg.Error as exc:
                log.warning("%s pass failed: %s", self.name, exc)
            await asyncio.sleep(self.interval * random.uniform(0.8, 1.2))

    async def run_once(self) -> int:
        """One pass: rescue lapsed leases in batches, if no other worker is doing it."""
        total = 0
        while True:
            async with self.pool.connection() as conn:
                (lock,) = await execute_async(conn, self.q(
                    "try_maintenance_lock", key=lock_key(self.settings.schema, self.name)))
                if not lock["acquired"]:
                    return total
                await execute_async(conn, self.q(
                    "set_statement_timeout", milliseconds=str(STATEMENT_TIMEOUT_MS)))
                rows = await execute_async(conn, self.q("rescue_lapsed", limit=BATCH))
            total += len(rows)
            if len(rows) < BATCH:
                return total
