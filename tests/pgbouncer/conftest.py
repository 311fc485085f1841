"""A private PgBouncer (transaction mode) for the tests in this folder."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.pgbouncer.bouncer import Bouncer, available, running_bouncer


@pytest.fixture(scope="module")
def bouncer(pg_server_dsn: str) -> Iterator[Bouncer]:
    reason = available()
    if reason is not None:
        pytest.skip(reason)
    with running_bouncer(pg_server_dsn) as running:
        yield running


@pytest.fixture
def warm_bouncer(bouncer: Bouncer, pg_dsn: str) -> Bouncer:
    """``bouncer`` with several server connections open to the test database."""
    bouncer.warm(pg_dsn)
    return bouncer
