"""Which database errors mean "PostgreSQL is unavailable right now, try again"
rather than "this request is wrong": one classification, used by the client
(to raise ``DatabaseUnavailable``) and by the worker (to back off and retry
a write instead of dropping it)."""

from __future__ import annotations

import psycopg
from psycopg_pool import PoolTimeout

from portqueue.driver import sqlstate
from portqueue.errors import DatabaseUnavailable

# Server-side reasons to come back later. Class 08 (connection exception) is
# matched as a class; a statement timeout (57014) is not here: it is about the
# statement, and retrying it unchanged would time out again.
UNAVAILABLE_SQLSTATES = frozenset({
    "25006",  # read_only_sql_transaction: a read-only database or a standby
    "53300",  # too_many_connections
    "57P01",  # admin_shutdown: the server is stopping, or pg_terminate_backend
    "57P02",  # crash_shutdown
    "57P03",  # cannot_connect_now: starting up or in recovery
    "57P05",  # idle_session_timeout
})


def is_unavailable(error: BaseException) -> bool:
    """True for a lost or refused connection and the SQLSTATEs above."""
    code = sqlstate(error)
    if code is None:
        # No server error code: the connection failed or broke (a pool timeout
        # included), so the request never got an answer.
        return isinstance(error, psycopg.OperationalError)
    return code in UNAVAILABLE_SQLSTATES or code.startswith("08")


def unavailable(error: BaseException) -> DatabaseUnavailable:
    """``error`` as the client's retryable error (raise it ``from error``)."""
    code = sqlstate(error)
    reason = "read-only" if code == "25006" else "unavailable"
    return DatabaseUnavailable(f"the database is {reason}, try again later: {error}", code)


def session_lost(error: BaseException) -> bool:
    """True when an existing session was ended (terminated, server stopping,
    connection dropped), as opposed to the server refusing new work: the
    next try, on a new connection, may well succeed at once."""
    code = sqlstate(error)
    if code is None:
        return isinstance(error, psycopg.OperationalError) and not isinstance(error, PoolTimeout)
    return code in ("57P01", "57P02")


# undefined_table, invalid_schema_name: what portqueue's own statements meet
# on a schema that was never migrated.
NOT_MIGRATED_SQLSTATES = frozenset({"42P01", "3F000"})


def schema_missing(error: BaseException) -> bool:
    """True when a portqueue statement failed because its tables do not exist."""
    return sqlstate(error) in NOT_MIGRATED_SQLSTATES


# What a refused connection says. psycopg gives no SQLSTATE for a connection
# the server refused at start-up (libpq keeps the server's error fields to
# itself and hands over the formatted message only), so the SQLSTATEs below
# match only where a code does come through (a refusal wrapped by another
# driver, a proxy that forwards it after connecting). The server's messages
# are in the language of its lc_messages: the English ones are matched as a
# last resort, and a caller that reached the server with the same DSN before
# says so (``reached``): a refusal then is not a wrong DSN, whatever its
# language.
SERVER_FULL_SQLSTATES = ("53300", "57P03")  # too_many_connections, cannot_connect_now
SERVER_FULL_MESSAGES = ("too many clients already", "remaining connection slots are reserved",
                        "the database system is starting up",
                        "the database system is in recovery mode",
                        "the database system is not yet accepting connections")


def server_full(error: BaseException, *, reached: bool = False) -> bool:
    """True when the server refused a new connection for want of a free slot
    (or for starting up): worth waiting for, unlike a wrong DSN. ``reached``:
    the same DSN connected before, so a refused connect (an
    ``OperationalError`` without SQLSTATE) counts too."""
    code = sqlstate(error)
    if code in SERVER_FULL_SQLSTATES:
        return True
    if reached and code is None and isinstance(error, psycopg.OperationalError) \
            and not isinstance(error, PoolTimeout):
        return True
    message = str(error)
    return any(text in message for text in SERVER_FULL_MESSAGES)
