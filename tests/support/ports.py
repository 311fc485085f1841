"""A local TCP port for a server a test starts (a PgBouncer, a dashboard, a
metrics endpoint, a PostgreSQL of its own), or one nothing listens on."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port on 127.0.0.1 free a moment ago (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
