"""Running ``portqueue`` commands in-process (typer's CliRunner) against the test schema."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import threading
from typing import Any

from typer.testing import CliRunner, Result

from portqueue.cli import app


class Cli:
    """``cli("jobs", "emails")`` runs ``portqueue jobs emails --dsn … --schema …``.

    PORTQUEUE_* variables of the developer's shell are removed for the call, so a
    test sees only the options it passes."""

    def __init__(self, dsn: str, schema: str) -> None:
        self.dsn = dsn
        self.schema = schema
        self.runner = CliRunner()

    def __call__(self, *args: str, input: str | None = None, dsn: str | None = None,
                 env: dict[str, str | None] | None = None) -> Result:
        # Right after the command name, so that options in ``args`` win.
        command = [args[0], "--dsn", dsn or self.dsn, "--schema", self.schema, *args[1:]]
        return self.bare(*command, input=input, env=env)

    def bare(self, *args: str, input: str | None = None,
             env: dict[str, str | None] | None = None) -> Result:
        """The command exactly as given: no --dsn, no --schema."""
        clean: dict[str, str | None] = {
            "PORTQUEUE_DSN": None, "PORTQUEUE_SCHEMA": None, "PORTQUEUE_INSTANCE_KEY": None}
        clean.update(env or {})
        return self.runner.invoke(app, list(args), input=input, env=clean,
                                  catch_exceptions=False)

    def json(self, *args: str, input: str | None = None) -> Any:
        """The command with --json; asserts exit 0 and returns the decoded output."""
        result = self(*args, "--json", input=input)
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)


def run_on_terminal(command: list[str], env: dict[str, str],
                    timeout: float = 60) -> tuple[int, str, str]:
    """Run ``command`` with stderr on a pseudo-terminal (where progress bars are
    drawn) and stdout on a pipe; returns (exit code, stdout, terminal output)."""
    controller, terminal = pty.openpty()
    chunks: list[bytes] = []

    def drain() -> None:
        # The child blocks once the terminal's buffer is full: read as it writes.
        while True:
            try:
                data = os.read(controller, 65536)
            except OSError:  # EIO: every copy of the terminal side is closed
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=terminal,
                                   stdin=subprocess.DEVNULL, env=env)
    finally:
        os.close(terminal)
    stdout, _ = process.communicate(timeout=timeout)
    reader.join(timeout=10)
    os.close(controller)
    return process.returncode, stdout.decode(), b"".join(chunks).decode(errors="replace")
