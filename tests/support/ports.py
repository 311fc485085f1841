"""A local TCP port for a server a test starts (a PgBouncer, a dashboard, a
metrics endpoint, a PostgreSQL of its own), or one nothing listens on, and
whether an HTTP server or a PostgreSQL there answers yet."""

from __future__ import annotations

import socket

import httpx
import psycopg


def free_port() -> int:
    """A port on 127.0.0.1 free a moment ago (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def http_status(url: str) -> int | None:
    """The status of a GET of ``url``, or None while nothing answers there."""
    try:
        return httpx.get(url, timeout=1).status_code
    except httpx.TransportError:
        return None


def postgres_answers(dsn: str) -> bool:
    """Whether the PostgreSQL at ``dsn`` runs a query yet."""
    try:
        with psycopg.connect(dsn, connect_timeout=2) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.OperationalError:
        return False
