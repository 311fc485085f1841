"""Running the scheduler and maintenance services directly, outside a worker."""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from psycopg_pool import AsyncConnectionPool

from portqueue.settings import DEFAULT_RETENTION_SECONDS, Settings, client_settings
from portqueue.validation import DEFAULT_MAX_PAYLOAD_BYTES
from tests.pgbouncer import mode


def settings_for(
    dsn: str, schema: str, *, default_retention_seconds: int = DEFAULT_RETENTION_SECONDS
) -> Settings:
    return client_settings(
        mode.client_dsn(dsn), schema=schema, instance_key=None,
        max_payload_bytes=DEFAULT_MAX_PAYLOAD_BYTES, pool_min_size=1, pool_max_size=2,
        poll_only=mode.poll_only(), application_name="portqueue-test",
        default_retention_seconds=default_retention_seconds)


def service_pool(dsn: str, size: int = 2) -> AsyncConnectionPool:
    return AsyncConnectionPool(mode.client_dsn(dsn), min_size=1, max_size=size, open=False,
                               kwargs=mode.connection_kwargs())


class _Runnable(Protocol):
    async def run_once(self) -> int: ...


def run_once(
    cls: type[Any], dsn: str, schema: str, *,
    default_retention_seconds: int = DEFAULT_RETENTION_SECONDS, **options: Any
) -> tuple[Any, int]:
    """Build ``cls(settings, pool, **options)``, run one pass, return (service, count)."""

    async def main() -> tuple[Any, int]:
        settings = settings_for(dsn, schema, default_retention_seconds=default_retention_seconds)
        async with service_pool(dsn) as pool:
            service: _Runnable = cls(settings, pool, **options)
            return service, await service.run_once()

    return asyncio.run(main())
