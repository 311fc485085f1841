"""One database session for an operator command: a connection and a client on it.

The commands read and act through ``PortQueue`` only, with ``tx=`` on a
single connection the CLI opens itself, for two reasons: a database that is
down or refuses the login fails at once with the server's own message (a
client's pool would retry for 30 s first), and the command decides what is
one transaction (``add --file`` is all or nothing; ``remove`` by filter
commits page by page). Failures become exit codes here, in one place.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict

from portqueue.cli.base import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    checked_schema,
    describe,
    fail,
    redact,
    require_dsn,
)
from portqueue.client import PortQueue
from portqueue.errors import (
    InvalidArgument,
    PortQueueError,
    QueueNotEmpty,
    QueuePausedError,
    SchemaNotMigrated,
)
from portqueue.tx import SyncTx, from_psycopg

T = TypeVar("T")

# A database that does not answer fails the command after this long.
CONNECT_TIMEOUT_SECONDS = 10


class Session:
    """``pq`` acts through ``conn``: each ``run`` is its own transaction."""

    def __init__(self, pq: PortQueue, conn: psycopg.Connection[Any]) -> None:
        self.pq = pq
        self.conn = conn

    @contextmanager
    def transaction(self) -> Iterator[SyncTx]:
        """One transaction for several client calls: pass the yielded ``tx`` to each."""
        with self.conn.transaction():
            yield from_psycopg(self.conn)

    def run(self, method: Callable[..., T], **arguments: Any) -> T:
        """``method(**arguments)`` (a ``self.pq`` method) in a transaction of its own."""
        with self.transaction() as tx:
            return method(**arguments, tx=tx)


def usage_message(exc: InvalidArgument, names: Mapping[str, str]) -> str:
    """The client's message with its argument named as the command line names it:
    ``retry.max_attempts: …`` becomes ``--max-attempts: …`` (the longest known
    prefix of the argument is replaced)."""
    argument = exc.argument
    prefix = argument
    while prefix and prefix not in names:
        prefix = prefix.rpartition(".")[0]
    shown = names[prefix] + argument[len(prefix):] if prefix else argument
    return shown + str(exc)[len(argument):]


def connect(dsn: str) -> psycopg.Connection[Any]:
    """An autocommit connection, or the command fails now with the server's own message."""
    given = conninfo_to_dict(dsn)
    extra: dict[str, Any] = {}
    if "connect_timeout" not in given:
        extra["connect_timeout"] = CONNECT_TIMEOUT_SECONDS
    if "application_name" not in given:
        extra["application_name"] = "portqueue:cli"
    try:
        return psycopg.connect(dsn, autocommit=True, **extra)
    except psycopg.Error as exc:
        fail(EXIT_FAILURE, f"cannot connect: {redact(describe(exc), dsn)}")


def check_connection(dsn: str) -> None:
    """For commands that go on to open a pool: a pool would retry for 30 s before
    failing with a timeout instead of the server's message."""
    connect(dsn).close()


@contextmanager
def open_session(
    dsn: str | None,
    schema: str,
    *,
    names: Mapping[str, str] | None = None,
    instance_key: str | None = None,
) -> Iterator[Session]:
    """A session on ``dsn``; any failure inside ends the command with its exit code.

    ``names`` maps the client's argument names to the command's option names
    for bad-input messages.
    """
    dsn = require_dsn(dsn)
    schema = checked_schema(schema)
    conn = connect(dsn)
    try:
        with conn, PortQueue(dsn, schema=schema, instance_key=instance_key) as pq:
            yield Session(pq, conn)
    except InvalidArgument as exc:
        fail(EXIT_USAGE, redact(usage_message(exc, names or {}), dsn))
    except (QueuePausedError, QueueNotEmpty) as exc:
        fail(EXIT_FAILURE, str(exc))
    except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
        fail(EXIT_FAILURE, str(SchemaNotMigrated(schema)))
    except (PortQueueError, psycopg.Error) as exc:
        fail(EXIT_FAILURE, redact(describe(exc), dsn))
    except KeyboardInterrupt:
        fail(EXIT_INTERRUPTED, "interrupted; the transaction in progress was rolled back")
