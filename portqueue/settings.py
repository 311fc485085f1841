"""A client's validated settings, shared by PortQueue and AsyncPortQueue."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

from portqueue import validation
from portqueue.errors import InvalidArgument
from portqueue.queries import Queries, queries_for
from portqueue.types import Retention

DEFAULT_RETENTION_SECONDS = 7 * 24 * 3600


@dataclass(frozen=True)
class Settings:
    dsn: str = field(repr=False)  # may hold a password: never in a repr or a log
    schema: str
    instance_key: str | None
    max_payload_bytes: int
    pool_min_size: int
    pool_max_size: int
    poll_only: bool
    application_name: str
    default_retention_seconds: int
    queries: Queries
    # Per-outcome ttls and count caps under the job's and queue's (no ttl_seconds).
    default_retention: Retention = field(default_factory=Retention)

    def connection_kwargs(self, role: str) -> dict[str, Any]:
        """Connection settings for one role; the role names the connection in
        pg_stat_activity, so operators (and fault tests) can tell them apart."""
        kwargs: dict[str, Any] = {"application_name": f"{self.application_name}:{role}"}
        if self.poll_only:
            # PgBouncer in transaction mode cannot keep server-side prepared
            # statements: the next transaction may land on another server.
            kwargs["prepare_threshold"] = None
        return kwargs


def client_settings(
    dsn: object,
    *,
    schema: object,
    instance_key: object,
    max_payload_bytes: object,
    pool_min_size: object,
    pool_max_size: object,
    poll_only: object,
    application_name: object,
    default_retention_seconds: object,
    default_retention: object = None,
) -> Settings:
    if not isinstance(dsn, str) or not dsn:
        raise InvalidArgument("dsn", "must be a non-empty connection string")
    try:
        conninfo_to_dict(dsn)
    except psycopg.Error:
        # libpq's parse errors quote the offending token, which may be the
        # password ("invalid percent-encoded token"); the pool would then log
        # it on every retry. Refuse it here, quoting nothing.
        raise InvalidArgument("dsn", "is not a valid connection string") from None
    if not isinstance(poll_only, bool):
        raise InvalidArgument("poll_only", "must be a bool")
    checked_schema = validation.schema_name(schema)
    min_size = validation.integer("pool_min_size", pool_min_size, minimum=0, maximum=1000)
    max_size = validation.integer("pool_max_size", pool_max_size, minimum=1, maximum=1000)
    if min_size > max_size:
        raise InvalidArgument("pool_min_size", "must not exceed pool_max_size")
    return Settings(
        dsn=dsn,
        schema=checked_schema,
        instance_key=validation.optional_text("instance_key", instance_key),
        max_payload_bytes=validation.integer(
            "max_payload_bytes", max_payload_bytes, minimum=1,
            maximum=validation.MAX_PAYLOAD_BYTES_LIMIT),
        pool_min_size=min_size,
        pool_max_size=max_size,
        poll_only=poll_only,
        application_name=validation.text("application_name", application_name, max_length=40),
        default_retention_seconds=validation.integer(
            "default_retention_seconds", default_retention_seconds, minimum=0),
        queries=queries_for(checked_schema),
        default_retention=validation.default_retention(default_retention),
    )
