"""The CI legs' test selection stays honest (.ci/run, tests/conftest.py)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.legs import EVERY_MAJOR

ROOT = Path(__file__).resolve().parents[2]


def _marks_slow(path: Path) -> bool:
    return "pytest.mark.slow" in path.read_text(encoding="utf-8")


def test_every_major_names_files_of_slow_tests() -> None:
    # A renamed file would silently drop its tests from the pg18 leg.
    for name in EVERY_MAJOR:
        path = ROOT / name
        assert path.is_file(), f"{name} is not a test file any more"
        assert _marks_slow(path), f"{name} has no slow test: EVERY_MAJOR is for slow tests"
        ast.parse(path.read_text(encoding="utf-8"))


def test_ci_runs_readmes_test_command() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "python -m pytest -n auto" in readme
    assert 'TEST_COMMAND=(python -m pytest -n auto)' in ci
