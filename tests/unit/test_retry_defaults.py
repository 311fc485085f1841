"""The built-in retry policy is written once, as ``RetryPolicy()``'s field defaults.

SQL cannot import it, so every other place that states it (the statements that
resolve a job's policy, the job table's server defaults, the docs' table) is
checked against it here; changing one place fails until all agree.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from portqueue.queries import load_fragments
from portqueue.types import RetryPolicy

ROOT = Path(__file__).resolve().parents[2]
BUILT_IN = RetryPolicy()
# Column of a job (and queue) row -> the built-in value it falls back to.
EXPECTED: dict[str, Any] = {
    "max_attempts": BUILT_IN.max_attempts,
    "retry_delay_seconds": BUILT_IN.delay_seconds,
    "backoff_strategy": BUILT_IN.backoff.strategy.value,
    "backoff_factor": BUILT_IN.backoff.factor,
    "backoff_jitter": BUILT_IN.backoff.jitter,
}


def _sql_value(literal: str) -> Any:
    literal = literal.strip().removesuffix("::text")
    if literal in ("true", "false"):
        return literal == "true"
    if literal.startswith("'"):
        return literal.strip("'")
    return float(literal)


def _coalesced(fragment: str, pattern: str) -> dict[str, Any]:
    found = {column: _sql_value(literal)
             for column, literal in re.findall(pattern, load_fragments()[fragment])}
    return {column: found.get(column) for column in EXPECTED}


def test_adding_a_job_falls_back_to_the_built_in_policy() -> None:
    # coalesce(e.<column>, d.<column>, <built-in>): the job's, the queue's, the built-in.
    found = _coalesced("resolved_retry_policy", r"coalesce\(e\.(\w+), d\.\1, ([^)]+)\)")
    assert found == EXPECTED


def test_a_dead_letter_copy_falls_back_to_the_built_in_policy() -> None:
    found = _coalesced("dead_letter_copy", r"coalesce\(dq\.(\w+), ([^)]+)\)")
    assert found == EXPECTED


def test_the_job_tables_server_defaults_are_the_built_in_policy() -> None:
    # sql/schema.sql is the migrated schema (tests/migrations/test_schema_snapshot.py).
    schema_sql = (ROOT / "sql" / "schema.sql").read_text(encoding="utf-8")
    job_table = schema_sql.split("CREATE TABLE portqueue.job (", 1)[1].split("\n);", 1)[0]
    found = {}
    for column in EXPECTED:
        match = re.search(rf"^    {column} [^\n]* DEFAULT (\S+) NOT NULL,$", job_table, re.M)
        found[column] = _sql_value(match.group(1)) if match else None
    assert found == EXPECTED


def test_the_docs_table_states_the_built_in_policy() -> None:
    producing = (ROOT / "docs" / "producing.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `([\w.]+)` \| `([^`]+)`", producing, re.M))
    assert rows["max_attempts"] == str(BUILT_IN.max_attempts)
    assert rows["delay_seconds"] == str(BUILT_IN.delay_seconds)
    assert rows["backoff.strategy"] == BUILT_IN.backoff.strategy.name
    assert rows["backoff.factor"] == str(BUILT_IN.backoff.factor)
    assert rows["backoff.max_delay_seconds"] == str(BUILT_IN.backoff.max_delay_seconds)
    assert rows["backoff.jitter"] == str(BUILT_IN.backoff.jitter)
    for page, sentence in [("guarantees.md", "The default `max_attempts` is {}."),
                           ("consuming.md", "The default is {}:")]:
        text = (ROOT / "docs" / page).read_text(encoding="utf-8")
        assert sentence.format(BUILT_IN.max_attempts) in text, page
