"""CI's legs skip, beyond pg15, the tests that use no server of the suite's
(.ci/run): tests/conftest.py must mark exactly those."""

from __future__ import annotations

import pytest


def test_a_test_without_the_server_is_marked_no_server(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("no_server") is not None


def test_a_test_of_the_server_is_not(pg_server_dsn: str, request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("no_server") is None


def test_nor_one_whose_fixtures_reach_it_indirectly(
    pg_dsn: str, request: pytest.FixtureRequest
) -> None:
    assert request.node.get_closest_marker("no_server") is None
