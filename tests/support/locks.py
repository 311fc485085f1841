"""Advisory locks a test holds while processes or sessions wait on them."""

from __future__ import annotations

from types import TracebackType

import psycopg


class HeldLock:
    """An exclusive session advisory lock the test holds, on a connection of
    its own, until ``release()`` or the end of its ``with`` block; handlers
    of the fault apps' ``{"fault": "block", "lock": key}`` wait (shared) on it."""

    def __init__(self, dsn: str, key: int) -> None:
        self.key = key
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.conn.execute("SELECT pg_advisory_lock(%s)", [key])

    def release(self) -> None:
        """Idempotent: a test may let the waiters go early, inside its block."""
        if not self.conn.closed:
            self.conn.execute("SELECT pg_advisory_unlock(%s)", [self.key])
            self.conn.close()

    def __enter__(self) -> HeldLock:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.release()
