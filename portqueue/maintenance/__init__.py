"""Maintenance services: each runs in every worker and acts from one at a time.

Every service has the same shape (see ``rescuer.py``): a ``name``, ``run(stopping)``
looping on a jittered interval, and ``run_once()`` doing one bounded pass under
a transaction-scoped advisory lock, so only one process acts at a time.

``run_pass(dsn)`` runs one pass of every maintenance service outside a worker
(what ``portqueue prune`` does).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from psycopg_pool import AsyncConnectionPool

from portqueue.maintenance.leader import Leadership
from portqueue.settings import DEFAULT_RETENTION_SECONDS, Settings, client_settings
from portqueue.types import Retention
from portqueue.validation import DEFAULT_MAX_PAYLOAD_BYTES


class Service(Protocol):
    name: str
    leadership: Leadership | None

    def run(self, stopping: Callable[[], bool],
            sleep: Callable[[float], Awaitable[None]] = ...) -> Awaitable[None]: ...


class MaintenanceService(Service, Protocol):
    def run_once(self) -> Awaitable[int]: ...


def _maintenance(settings: Settings, pool: AsyncConnectionPool[Any],
                 on_rescued: Callable[[list[str]], None] | None = None,
                 ) -> list[MaintenanceService]:
    from portqueue.maintenance.expirer import Expirer
    from portqueue.maintenance.pruner import Pruner
    from portqueue.maintenance.reaper import Reaper
    from portqueue.maintenance.rescuer import Rescuer
    from portqueue.maintenance.throttles import ThrottlePruner

    # Rescue and expire before pruning: both finish jobs the pruner may then take.
    return [Rescuer(settings, pool, on_rescued=on_rescued), Expirer(settings, pool),
            Pruner(settings, pool), Reaper(settings, pool), ThrottlePruner(settings, pool)]


def maintenance_services(settings: Settings, pool: AsyncConnectionPool[Any],
                         on_rescued: Callable[[list[str]], None] | None = None,
                         ) -> list[Service]:
    """The services a worker runs unless started with maintenance=False;
    ``on_rescued(job_ids)`` after each batch of lapsed leases taken back."""
    return list(_maintenance(settings, pool, on_rescued))


def scheduler_services(settings: Settings, pool: AsyncConnectionPool[Any]) -> list[Service]:
    """The services a worker runs unless started with scheduler=False."""
    from portqueue.maintenance.scheduler import Scheduler

    return [Scheduler(settings, pool)]


def run_pass(
    dsn: str,
    *,
    schema: str = "portqueue",
    default_retention_seconds: int = DEFAULT_RETENTION_SECONDS,
    on_service: Callable[[str], None] | None = None,
    default_retention: Retention | Mapping[str, Any] | None = None,
) -> dict[str, int]:
    """Run one pass of every maintenance service; returns how many rows each handled.

    Keys: ``rescuer`` (lapsed leases rescued), ``expirer`` (jobs expired),
    ``pruner`` (finished jobs deleted), ``reaper`` (dead worker rows deleted),
    ``throttles`` (ended throttle windows deleted).
    ``default_retention_seconds`` (default 7 days) and ``default_retention``
    (per-outcome ttls and count caps) should match the workers' clients. A
    service another process is running right now is skipped (it reports 0):
    that process is doing the same work. Blocks; not for use
    inside a running event loop (await ``run_pass_async`` there).
    ``on_service(name)`` is called as each service starts (the CLI's progress bar).
    """
    return asyncio.run(run_pass_async(
        dsn, schema=schema, default_retention_seconds=default_retention_seconds,
        on_service=on_service, default_retention=default_retention))


async def run_pass_async(
    dsn: str,
    *,
    schema: str = "portqueue",
    default_retention_seconds: int = DEFAULT_RETENTION_SECONDS,
    on_service: Callable[[str], None] | None = None,
    default_retention: Retention | Mapping[str, Any] | None = None,
) -> dict[str, int]:
    """``run_pass`` for asyncio code."""
    # poll_only: a pass listens to nothing, and without server-side prepared
    # statements its repeated statements (a lock per service, a prune per
    # batch) also work through PgBouncer in transaction mode.
    settings = client_settings(
        dsn, schema=schema, instance_key=None, max_payload_bytes=DEFAULT_MAX_PAYLOAD_BYTES,
        pool_min_size=1, pool_max_size=1, poll_only=True, application_name="portqueue",
        default_retention_seconds=default_retention_seconds,
        default_retention=default_retention)
    async with AsyncConnectionPool(
            dsn, min_size=1, max_size=1, open=False, name="portqueue:maintenance",
            kwargs=settings.connection_kwargs("maintenance")) as pool:
        counts: dict[str, int] = {}
        for service in _maintenance(settings, pool):
            if on_service is not None:
                on_service(service.name)
            counts[service.name] = await service.run_once()
        return counts
