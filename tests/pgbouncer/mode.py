"""``PORTQUEUE_TEST_PGBOUNCER=1``: the test suite's clients go through PgBouncer
in transaction mode, with ``poll_only=True`` (SPEC §4: PgBouncer support).

tests/conftest.py loads this plugin when the variable is set. For the whole
session it starts a private PgBouncer (tests/pgbouncer/bouncer.py) and wraps
``PortQueue`` and ``AsyncPortQueue`` so that every client a test builds for the
test server connects through it with ``poll_only=True``; the scheduler and
maintenance services tests build (tests/support/services.py) follow
``client_dsn`` and ``connection_kwargs`` below. The tests' own connections
(the ``db`` fixture, lock holders, LISTEN observers) stay direct: they arrange
and observe, they are not the code under test.

The switch runs tests/integration only (``SCOPE``): the other folders start
servers, PgBouncers or processes of their own, which this wiring does not
reroute. CI runs it as a leg of its own (.ci/run). Tests that need what
transaction pooling takes away are skipped with the reason in
``NEEDS_A_SESSION``; tests that never use the test server, with the reason in
``NOT_ROUTED``.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from portqueue import AsyncPortQueue, PortQueue
from tests.pgbouncer.bouncer import Bouncer, available, running_bouncer

SWITCH = "PORTQUEUE_TEST_PGBOUNCER"
TESTS = Path(__file__).resolve().parents[1]
SCOPE = TESTS / "integration"

# node id (without parameters) -> why it cannot pass through PgBouncer in
# transaction mode. Keep it short: each entry is a behaviour not covered there.
_NOTIFY = ("times the LISTEN/NOTIFY path, which poll_only turns off; the poll_only path "
           "is test_worker_wakeups.py::test_poll_only_runs_jobs_without_listen_and_delivers_"
           "cancels and test_worker_cancel.py's poll_only test")
_SERVER_CONNECTIONS = ("waits for the handler pool's server connections to close; PgBouncer "
                       "keeps server connections open (and named after their last client) "
                       "by design")
_WAITER_SESSION = ("finds the waiter's read in pg_stat_activity by its application_name; "
                   "PgBouncer's server connections keep their last client's name")
_BUDGET = ("counts a worker's own server sessions in pg_stat_activity; through PgBouncer the "
           "server sees PgBouncer's pooled connections, not the worker's")
NEEDS_A_SESSION: dict[str, str] = {
    "tests/integration/test_read.py::test_datetimes_are_utc_whatever_the_session_time_zone":
        "sets the session time zone with the `options` startup parameter, which PgBouncer "
        "refuses",
    "tests/integration/test_worker_cancel.py::"
    "test_cancel_sets_a_running_handlers_signal_within_a_second": _NOTIFY,
    "tests/integration/test_worker_cancel.py::"
    "test_a_handler_raising_after_the_signal_ends_cancelled_not_failed": _NOTIFY,
    "tests/integration/test_worker_cancel.py::"
    "test_cancel_reaches_an_async_handler_awaiting_its_signal": _NOTIFY,
    "tests/integration/test_worker_context.py::"
    "test_many_handlers_opening_their_first_transaction_at_once": _SERVER_CONNECTIONS,
    "tests/integration/test_worker_shutdown.py::"
    "test_a_worker_stopped_right_after_start_leaves_no_session_open": _SERVER_CONNECTIONS,
    "tests/integration/test_worker_shutdown.py::"
    "test_a_stopped_worker_closes_its_heartbeat_session": _SERVER_CONNECTIONS,
    "tests/integration/test_worker_context.py::"
    "test_many_async_handlers_opening_their_first_transaction_at_once": _SERVER_CONNECTIONS,
    "tests/integration/test_worker_wakeups.py::"
    "test_an_idle_worker_starts_a_committed_job_within_milliseconds": _NOTIFY,
    "tests/integration/test_worker_wakeups.py::"
    "test_an_idle_async_worker_starts_a_committed_job_within_milliseconds": _NOTIFY,
    "tests/integration/test_worker_wakeups.py::"
    "test_a_killed_listen_connection_is_replaced_and_followed_by_a_poll": _NOTIFY,
    "tests/integration/test_worker_wakeups.py::"
    "test_listener_is_the_only_extra_connection_and_it_names_itself": _NOTIFY,
    "tests/integration/test_worker_wakeups.py::"
    "test_claims_run_on_one_session_of_their_own": _SERVER_CONNECTIONS,
    "tests/integration/test_worker_frozen_session.py::"
    "test_a_frozen_maintenance_transaction_loses_its_lock_within_seconds":
        "relies on idle_in_transaction_session_timeout, sent as a startup option, which "
        "poll_only leaves out (PgBouncer refuses it)",
    "tests/integration/test_worker_multi_queue.py::"
    "test_a_freed_slot_of_a_full_queue_claims_it_whatever_the_other_queues_returned": _NOTIFY,
    "tests/integration/test_worker_multi_queue.py::"
    "test_a_notify_claims_only_the_queue_it_names": _NOTIFY,
    "tests/integration/test_wait_edges.py::"
    "test_a_job_retried_after_its_finish_is_waited_for_again": _WAITER_SESSION,
    "tests/integration/test_wait_edges.py::"
    "test_the_async_wait_for_a_retried_job_returns_its_next_finish": _WAITER_SESSION,
    "tests/integration/test_commit_durability.py::"
    "test_a_worker_dsn_without_flush_waits_covers_its_writes_and_not_the_producers":
        "sets synchronous_commit with the `options` startup parameter, which PgBouncer "
        "refuses (behind PgBouncer: ALTER ROLE … SET synchronous_commit)",
    "tests/integration/test_bulk_retry_cancel.py::"
    "test_cancel_jobs_stops_running_handlers_through_their_signal": _NOTIFY,
    "tests/integration/test_worker_wake_share.py::"
    "test_only_the_oldest_workers_listen_and_the_next_take_over": _NOTIFY,
    "tests/integration/test_worker_connection_budget.py::"
    "test_a_worker_holds_three_connections_by_default": _BUDGET,
    "tests/integration/test_worker_connection_budget.py::"
    "test_poll_only_gives_the_listeners_share_to_the_pool": _BUDGET,
    "tests/integration/test_worker_connection_budget.py::"
    "test_more_connections_widen_the_pool_only": _BUDGET,
    "tests/integration/test_with_settings.py::"
    "test_a_derived_client_runs_the_originals_handlers_with_its_own_settings":
        "compares the derived client's DSN and finds its session by application_name; the "
        "switch routes every client's DSN, and PgBouncer names server connections after "
        "their last client",
}

NOT_ROUTED: dict[str, str] = {
    "tests/integration/test_demo.py::test_demo_without_a_dsn_starts_an_embedded_server":
        "starts an embedded server of its own and never connects to the test server",
}

_active: Bouncer | None = None


def enabled() -> bool:
    return os.environ.get(SWITCH, "") not in ("", "0")


def client_dsn(dsn: str) -> str:
    """``dsn`` as a client under test should use it: through PgBouncer when active."""
    return _active.route(dsn) if _active is not None else dsn


def poll_only() -> bool:
    return _active is not None


def connection_kwargs() -> dict[str, Any]:
    """Extra psycopg connection settings for pools the tests build themselves."""
    return {"prepare_threshold": None} if _active is not None else {}


def _rerouted(init: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(init)
    def wrapper(self: Any, dsn: str, **settings: Any) -> None:
        settings["poll_only"] = True
        init(self, client_dsn(dsn), **settings)

    return wrapper


@contextlib.contextmanager
def activated(bouncer: Bouncer) -> Iterator[Bouncer]:
    """Route every client built inside the block through ``bouncer``, poll_only."""
    global _active
    with pytest.MonkeyPatch.context() as patch:
        for cls in (PortQueue, AsyncPortQueue):
            patch.setattr(cls, "__init__", _rerouted(cls.__init__))
        _active = bouncer
        try:
            yield bouncer
        finally:
            _active = None


@pytest.fixture(scope="session", autouse=True)
def _clients_through_pgbouncer(pg_server_dsn: str) -> Iterator[Bouncer]:
    reason = available()
    if reason is not None:
        pytest.exit(f"{SWITCH} is set but {reason}", returncode=2)
    with running_bouncer(pg_server_dsn) as bouncer, activated(bouncer):
        yield bouncer
        # Proof the switch did something: this process's clients logged in
        # through PgBouncer (a silent fall-back to direct connections would
        # otherwise pass every test).
        assert bouncer.client_logins() > 0, "no client connected through PgBouncer"


def pytest_ignore_collect(collection_path: Path) -> bool | None:
    """Collect SCOPE (and the folders above it) only."""
    if collection_path.name in ("__init__.py", "conftest.py"):
        return None
    if not collection_path.is_relative_to(TESTS) or SCOPE.is_relative_to(collection_path):
        return None
    return None if collection_path.is_relative_to(SCOPE) else True


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # tests/pgbouncer/test_suite.py checks that every entry still names a test.
    for item in items:
        node = item.nodeid.split("[", 1)[0]
        reason = NEEDS_A_SESSION.get(node) or NOT_ROUTED.get(node)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=f"{SWITCH}: {reason}"))


def pytest_report_header() -> str:
    return (f"{SWITCH}=1: tests/integration, clients through PgBouncer in transaction mode, "
            "poll_only=True")
