"""Which database errors are "unavailable, retry" (``DatabaseUnavailable``):
the classification the client and the worker share (portqueue/availability.py)."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import errors
from psycopg_pool import PoolTimeout

from portqueue import DatabaseUnavailable, PortQueueError
from portqueue.availability import is_unavailable, session_lost, unavailable


@pytest.mark.parametrize("error", [
    errors.ReadOnlySqlTransaction("read-only"),
    errors.AdminShutdown("terminating connection due to administrator command"),
    errors.CrashShutdown("crash"),
    errors.CannotConnectNow("the database system is starting up"),
    errors.TooManyConnections("too many clients"),
    errors.ConnectionFailure("08006"),
    psycopg.OperationalError("server closed the connection unexpectedly"),
    PoolTimeout("couldn't get a connection after 30.00 sec"),
])
def test_unavailable_errors(error: Exception) -> None:
    assert is_unavailable(error)


@pytest.mark.parametrize("error", [
    errors.QueryCanceled("canceling statement due to statement timeout"),
    errors.UniqueViolation("duplicate key"),
    errors.SerializationFailure("could not serialize"),
    errors.UndefinedTable("no such table"),
    ValueError("not a database error"),
])
def test_errors_about_the_request_are_not_unavailable(error: Exception) -> None:
    assert not is_unavailable(error)


def test_a_session_ended_is_told_apart_from_a_refusal() -> None:
    assert session_lost(errors.AdminShutdown("terminated"))
    assert session_lost(psycopg.OperationalError("server closed the connection unexpectedly"))
    assert not session_lost(PoolTimeout("no connection"))
    assert not session_lost(errors.ReadOnlySqlTransaction("read-only"))
    assert not session_lost(errors.CannotConnectNow("starting up"))


def test_the_client_error_names_the_reason_and_keeps_the_sqlstate() -> None:
    error = unavailable(errors.ReadOnlySqlTransaction("cannot execute INSERT"))
    assert isinstance(error, DatabaseUnavailable)
    assert isinstance(error, PortQueueError)
    assert error.sqlstate == "25006"
    assert "read-only" in str(error)
    assert unavailable(psycopg.OperationalError("connection refused")).sqlstate is None
