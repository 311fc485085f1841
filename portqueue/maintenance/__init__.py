"""Maintenance services: each runs in every worker and acts from one at a time.

Every service has the same shape (see ``rescuer.py``): a ``name``, ``run(stopping)``
looping on a jittered interval, and ``run_once()`` doing one bounded pass under
a transaction-scoped advisory lock, so only one process acts at a time.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

from psycopg_pool import AsyncConnectionPool

from portqueue.settings import Settings


class Service(Protocol):
    name: str

    def run(self, stopping: Callable[[], bool]) -> Awaitable[None]: ...


def maintenance_services(settings: Settings, pool: AsyncConnectionPool) -> list[Service]:
    """The services a worker runs unless started with maintenance=False."""
    from portqueue.maintenance.rescuer import Rescuer

    return [Rescuer(settings, pool)]


def scheduler_services(settings: Settings, pool: AsyncConnectionPool) -> list[Service]:
    """The services a worker runs unless started with scheduler=False."""
    return []
