"""Leadership: one worker at a time runs the maintenance services (or the
scheduler); the others' services stay idle until its term ends.

Without it every worker ran every service on its interval, each pass a
transaction of its own to find another process had just done the same:
with many idle worker processes most of the database's statements were
those. A worker asks for a role with one statement (``lead_maintenance``),
which takes it when its term ended, renews it when this worker holds it,
and otherwise says when the other's term ends. Until then this worker's
services skip their passes without a round trip; the leader renews at
half its term, from its own loop (``keep``), so only a live leader keeps
the role. A leader that stops resigns; one that freezes or is cut off is
replaced when its term ends. The term is the shorter of TERM_SECONDS and the
worker's shortest lease (``term_for``): a frozen leader's own jobs lapse
with their lease, and the role must come free as soon, or nobody rescues
them until the term ends. Being leader is an optimisation, not a lock: each
pass still takes its service's advisory lock, so two workers that both
believe they lead never run one service at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

from portqueue import maintenance_operations as ops
from portqueue.queries import Query
from portqueue.settings import Settings

# Runs statements on the worker's pool within the pool role's deadline
# (``Connections.execute``): an ask on a connection that stopped answering
# must fail, or it would hold the pool's connection and this role for good.
Execute = Callable[[Query], Awaitable[list[list[dict[str, Any]]]]]

log = logging.getLogger("portqueue.maintenance")

TERM_SECONDS = 10.0


def term_for(lease_seconds: float) -> float:
    """The term of a worker whose shortest lease is ``lease_seconds``."""
    return min(TERM_SECONDS, lease_seconds)


class Leadership:
    """One role's leadership as this worker sees it; shared by the services of that role."""

    def __init__(self, settings: Settings, execute: Execute, worker_id: str,
                 role: str, term: float = TERM_SECONDS) -> None:
        self._q = settings.queries
        self._execute = execute
        self._worker_id = worker_id
        self.role = role
        self._term = term
        self._leads = False
        self._until = 0.0  # loop time the current term ends (ours or another's)
        self._asking = asyncio.Lock()

    async def leads(self) -> bool:
        """Whether this worker should run its passes now; a round trip only when
        the term ends (or, leading, at half of it)."""
        async with self._asking:
            now = asyncio.get_running_loop().time()
            left = self._until - now
            if (self._leads and left > self._term / 2) or (not self._leads and left > 0):
                return self._leads
            try:
                (rows,) = await self._execute(ops.lead(
                    self._q, role=self.role, worker_id=self._worker_id, seconds=self._term))
            except BaseException:
                self._leads, self._until = False, 0.0
                raise
            self._leads, seconds = ops.leadership(rows)
            self._until = now + seconds
            return self._leads

    async def keep(self, stopping: Callable[[], bool],
                   sleep: Callable[[float], Awaitable[None]]) -> None:
        """While leading, renew between passes too: a term shorter than the
        interval of the role's passes would otherwise lapse between them, and
        the role would pass from worker to worker. No statement while not
        leading; the services' passes ask then."""
        while not stopping():
            if self._leads:
                try:
                    await self.leads()
                except psycopg.Error as exc:
                    log.warning("renewing the %s leadership failed: %s", self.role, exc)
            await sleep(self._term / 4)

    async def resign(self) -> None:
        """Hand the role on (at stop): the next worker takes it at its next ask."""
        if self._leads:
            self._leads, self._until = False, 0.0
            await self._execute(ops.resign(self._q, worker_id=self._worker_id))
