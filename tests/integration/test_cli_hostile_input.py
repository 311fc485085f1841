"""Hostile text on the command line: every input a parser chokes on is a usage
error (exit 2, a message naming the argument, no traceback) and writes nothing."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import psycopg
import pytest

from portqueue import PortQueue
from tests.conftest import count_jobs
from tests.migrations.conftest import cli_command, cli_env
from tests.support.cli import Cli
from tests.support.job_ids import odd_spellings

Db = psycopg.Connection[Any]

NESTED = "[" * 10_000 + "]" * 10_000
HUGE_INTEGER = "1" * 5_000
# (JSON text, what the message says about it)
HOSTILE_JSON = [
    (NESTED, "is nested deeper than 200 arrays/objects"),
    ('{"a": ' * 5_000 + "1" + "}" * 5_000, "is nested deeper than 200 arrays/objects"),
    ("[" * 10_000, "is nested deeper than 200 arrays/objects"),  # never closed
    (HUGE_INTEGER, "has an integer of more than 4300 digits"),
    (f'{{"n": -{HUGE_INTEGER}}}', "has an integer of more than 4300 digits"),
    ("[1e400]", "has a number too large for a float"),
    ('{"a": NaN}', "NaN is not JSON"),
    ("[-Infinity]", "-Infinity is not JSON"),
]
IDS = ["nested-arrays", "nested-objects", "unclosed", "huge-int", "huge-negative",
       "huge-float", "nan", "infinity"]


@pytest.fixture
def cli(pg_dsn: str, schema: str) -> Cli:
    return Cli(pg_dsn, schema)


@pytest.mark.parametrize(("data", "message"), HOSTILE_JSON, ids=IDS)
def test_hostile_data_is_a_usage_error(
    cli: Cli, db: Db, schema: str, data: str, message: str
) -> None:
    result = cli("add", "hostile", data)  # an uncaught parser error would raise here
    assert result.exit_code == 2, result.output
    assert result.stderr == f"portqueue: error: DATA: {message}\n"
    assert count_jobs(db, schema) == 0


@pytest.mark.parametrize(("data", "message"), HOSTILE_JSON, ids=IDS)
def test_a_hostile_file_line_is_a_usage_error_naming_the_line(
    cli: Cli, db: Db, schema: str, tmp_path: Path, data: str, message: str
) -> None:
    path = tmp_path / "jobs.jsonl"
    path.write_text('{"data": 1}\n' f'{{"data": {data}}}\n')
    result = cli("add", "hostile", "--create-queue", "--file", str(path))
    assert result.exit_code == 2, result.output
    assert result.stderr == f"portqueue: error: --file line 2: {message}\n"
    assert count_jobs(db, schema) == 0


def test_the_console_script_prints_no_traceback(pg_dsn: str, schema: str) -> None:
    # PYTHONPATH: this checkout's code, not whichever portqueue is installed.
    env = cli_env(PORTQUEUE_DSN=pg_dsn, PORTQUEUE_SCHEMA=schema)
    for data in (NESTED, HUGE_INTEGER):
        done = subprocess.run([*cli_command(), "add", "hostile", data], env=env,
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 2, done.stderr[-2000:]
        assert "Traceback" not in done.stderr
        assert done.stderr.startswith("portqueue: error: DATA: ")


@pytest.mark.parametrize(
    "args",
    [["add", "hostile", "{}", "--priority", "٣"], ["add", "hostile", "{}", "--priority", "²"],
     ["add", "hostile", "{}", "--delay", HUGE_INTEGER], ["jobs", "hostile", "--limit", "²"],
     ["jobs", "hostile", "--offset", "٣"]],
    ids=["arabic-indic-digit", "superscript", "huge", "limit", "offset"])
def test_integer_options_take_ascii_digits_only(
    cli: Cli, db: Db, schema: str, args: list[str]
) -> None:
    result = cli(*args)
    assert result.exit_code == 2, result.output
    assert count_jobs(db, schema) == 0


def test_a_job_id_in_other_digits_names_no_job(cli: Cli, pq: PortQueue) -> None:
    added = pq.add_job(queue="hostile", data={})
    assert added.job_id is not None
    for spelling in odd_spellings(added.job_id):
        for command in ("job", "retry", "cancel", "remove"):
            result = cli(command, spelling)
            assert result.exit_code == 2, (command, spelling, result.output)
            assert "must be a UUID string" in result.stderr
    job = pq.get_job(job_id=added.job_id)
    assert job is not None and job.status.value == "pending"
