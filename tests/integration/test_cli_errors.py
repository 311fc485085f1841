"""What every operator command shares: the DSN from option or environment, exit codes
for a missing, unreachable or unmigrated database, passwords never printed, help
with examples, and the console script end to end."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from typer.testing import CliRunner

from portqueue import PortQueue
from portqueue.cli import app
from tests.migrations.conftest import CLOSED_PORT_DSN, cli_command, cli_env
from tests.support.cli import Cli

JOB_ID = "0193f0a4-8c1e-7b7a-9d6e-3f1c2a4b5d6e"
# One invocation per operator command, each valid on its own.
COMMANDS = {
    "add": ["add", "emails", "{}"],
    "job": ["job", JOB_ID],
    "jobs": ["jobs", "emails"],
    "stats": ["stats"],
    "queues": ["queues"],
    "schedules": ["schedules"],
    "retry": ["retry", JOB_ID],
    "cancel": ["cancel", JOB_ID],
    "remove": ["remove", JOB_ID],
    "pause": ["pause", "emails"],
    "resume": ["resume", "emails"],
    "prune": ["prune"],
    "dashboard": ["dashboard"],
}
CLOSED_PASSWORD = str(conninfo_to_dict(CLOSED_PORT_DSN)["password"])


@pytest.fixture
def cli(pg_dsn: str, schema: str) -> Cli:
    return Cli(pg_dsn, schema)


@pytest.mark.parametrize("command", COMMANDS.values(), ids=list(COMMANDS))
def test_no_database_is_a_usage_error(cli: Cli, command: list[str]) -> None:
    result = cli.bare(*command)
    assert result.exit_code == 2, result.output
    assert "--dsn" in result.stderr and "PORTQUEUE_DSN" in result.stderr


@pytest.mark.parametrize("command", COMMANDS.values(), ids=list(COMMANDS))
def test_an_unreachable_database_fails_at_once_without_the_password(
    cli: Cli, command: list[str]
) -> None:
    started = time.monotonic()
    result = cli(*command, dsn=CLOSED_PORT_DSN)
    assert result.exit_code == 1, result.output
    assert "cannot connect" in result.stderr and "Connection refused" in result.stderr
    assert CLOSED_PASSWORD not in result.output
    assert time.monotonic() - started < 5, "no pool retrying for 30 s"


@pytest.mark.parametrize("command", [COMMANDS["jobs"], COMMANDS["add"]], ids=["jobs", "add"])
def test_an_unparsable_dsn_is_a_usage_error_without_the_password(
    cli: Cli, command: list[str]
) -> None:
    # libpq quotes the offending DSN text in its message: the password is in it.
    result = cli(*command, dsn="postgresql://u:pw0rd%ZZ@127.0.0.1:1/x")
    assert result.exit_code == 2, result.output
    assert "--dsn: not a valid connection string" in result.stderr
    assert "pw0rd" not in result.output


def test_the_password_never_appears_in_output(cli: Cli, pg_dsn: str, pq: PortQueue) -> None:
    params = conninfo_to_dict(pg_dsn)
    # Trust authentication ignores a password; a server that checks one has it in pg_dsn.
    password = str(params.setdefault("password", "Pw-that-must-not-leak"))
    dsn = make_conninfo("", **params)
    for command in [*(c for name, c in COMMANDS.items() if name != "dashboard"),
                    ["job", "bad-id"], ["jobs", "emails", "--status", "nope"],
                    ["stats", "--schema", "no_such_schema"]]:
        result = cli(*command, dsn=dsn)
        assert password not in result.output, command


def test_an_unmigrated_schema_says_to_migrate(cli: Cli, pg_dsn: str) -> None:
    result = cli.bare("stats", "--dsn", pg_dsn, "--schema", "never_migrated")
    assert result.exit_code == 1
    assert "schema 'never_migrated' has no portqueue tables" in result.stderr
    assert "portqueue migrate" in result.stderr


def test_a_bad_schema_name_is_a_usage_error(cli: Cli, pg_dsn: str) -> None:
    result = cli.bare("jobs", "emails", "--dsn", pg_dsn, "--schema", "bad-name")
    assert result.exit_code == 2 and "PORTQUEUE_SCHEMA" in result.stderr


@pytest.mark.parametrize("command", [*COMMANDS, "migrate", "worker", "demo"])
def test_every_command_has_help_with_an_example(command: str) -> None:
    result = CliRunner().invoke(app, [command, "--help"])
    assert result.exit_code == 0, result.output
    assert "Example" in result.stdout and f"portqueue {command}" in result.stdout


@pytest.mark.slow
def test_console_script_reads_the_environment(pg_dsn: str, schema: str, pq: PortQueue) -> None:
    env = cli_env(PORTQUEUE_DSN=pg_dsn, PORTQUEUE_SCHEMA=schema)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*cli_command(), *args], env=env, capture_output=True,
                              text=True, timeout=60, check=False)

    pq.pause_queue(queue="emails")  # the queue exists, as add requires
    pq.resume_queue(queue="emails")
    added = run("add", "emails", '{"to": "a@example.com"}', "--json")
    assert added.returncode == 0, added.stderr
    job_id = json.loads(added.stdout)["job_id"]
    shown = run("job", job_id)
    assert shown.returncode == 0 and "a@example.com" in shown.stdout
