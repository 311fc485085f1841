"""pyproject's wheel mapping, without building a wheel: every file of sql/ that
queries.py loads is carried, and sql/expanded/ is not (it is never read at run
time; the built wheel is checked in tests/migrations/test_wheel.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # 3.11+

ROOT = Path(__file__).resolve().parents[2]


def test_wheel_carries_each_sql_file_and_not_the_expanded_ones() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    forced = config["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"]
    sql = {source: target for source, target in forced.items() if source.startswith("sql")}
    assert set(sql) == {f"sql/{path.name}" for path in (ROOT / "sql").glob("*.sql")}
    assert all(target == f"portqueue/_{source}" for source, target in sql.items())
    assert not any("expanded" in source for source in forced)
    assert forced["migrations"] == "portqueue/_migrations"
