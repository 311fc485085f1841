"""The CI legs' test selection stays honest (.ci/run, tests/conftest.py)."""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import pytest

from portqueue.embedded import default_data_dir
from portqueue.queries import load_templates
from tests.support import server
from tests.support.legs import (
    EVERY_MAJOR,
    NOT_ON_SERVER_LEGS,
    NOT_THROUGH_PGBOUNCER,
    SERVER_LEGS,
    SPAWNS_PROCESSES,
)
from tests.support.query_coverage import QueryCoverage

ROOT = Path(__file__).resolve().parents[2]


def _marks_slow(path: Path) -> bool:
    return "pytest.mark.slow" in path.read_text(encoding="utf-8")


def test_every_major_names_files_of_slow_tests() -> None:
    # A renamed file would silently drop its tests from the pg18 leg.
    for name in EVERY_MAJOR:
        path = ROOT / name
        assert path.is_file(), f"{name} is not a test file any more"
        assert _marks_slow(path) or name in SPAWNS_PROCESSES, (
            f"{name} has no slow test: EVERY_MAJOR is for slow tests")
        ast.parse(path.read_text(encoding="utf-8"))


def test_files_marked_slow_from_here_exist() -> None:
    for name in SPAWNS_PROCESSES:
        assert (ROOT / name).is_file(), f"{name} is not a test file any more"


def test_ci_runs_readmes_test_command() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "python -m pytest -n auto" in readme
    assert 'TEST_COMMAND=(python -m pytest -n auto)' in ci


def test_the_suites_embedded_server_is_its_own_and_goes_with_the_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Issue 18 item 7: a user's start_embedded() server was the suite's.
    for variable in ("PORTQUEUE_TEST_DSN", "PORTQUEUE_DSN", server.EMBEDDED_DIRECTORY,
                     server._OWNER):
        monkeypatch.delenv(variable, raising=False)
    server.claim_embedded_directory()
    directory = Path(os.environ[server.EMBEDDED_DIRECTORY])
    assert directory.is_dir()
    assert directory not in (default_data_dir(), default_data_dir("demo"))
    server.release_embedded_directory()
    assert not directory.exists() and server.EMBEDDED_DIRECTORY not in os.environ


def test_a_named_server_needs_no_embedded_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(server.EMBEDDED_DIRECTORY, raising=False)
    monkeypatch.setenv("PORTQUEUE_TEST_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
    server.claim_embedded_directory()
    assert server.EMBEDDED_DIRECTORY not in os.environ


def test_the_second_server_legs_name_test_files_and_queries_that_exist() -> None:
    # A renamed file would silently drop its tests from the pg18 and PgBouncer
    # legs (the query check would then fail CI, but name the query, not the file).
    for name in SERVER_LEGS:
        assert (ROOT / name).exists(), f"{name} in SERVER_LEGS is not in tests/ any more"
    assert set(NOT_ON_SERVER_LEGS) | set(NOT_THROUGH_PGBOUNCER) <= set(load_templates())


def test_the_query_check_names_what_no_test_ran(tmp_path: Path) -> None:
    names = sorted(set(load_templates()) - set(NOT_ON_SERVER_LEGS))
    (tmp_path / "gw0.json").write_text(json.dumps({"a": names[:-2]}), encoding="utf-8")
    (tmp_path / "gw1.json").write_text(json.dumps({"b": names[-2:-1]}), encoding="utf-8")
    assert QueryCoverage.missing(tmp_path, NOT_ON_SERVER_LEGS) == names[-1:]
    (tmp_path / "gw2.json").write_text(json.dumps({"c": names[-1:]}), encoding="utf-8")
    assert QueryCoverage.missing(tmp_path, NOT_ON_SERVER_LEGS) == []


def test_each_second_server_leg_runs_server_legs_and_checks_every_query() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    for leg in ("leg_pg18", "leg_pgbouncer"):
        body = ci.split(f"{leg}() {{", 1)[1].split("\n}", 1)[0]
        assert "PORTQUEUE_TEST_EVERY_QUERY=1" in body, leg
        assert "server_legs" in body, leg
