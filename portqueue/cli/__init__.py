"""The ``portqueue`` command line (console script ``portqueue.cli:main``).

One Typer app (``base.app``) and a module per command group, each registering
its commands when imported: ``database`` (migrate, prune), ``worker``,
``dashboard``, ``demo``, ``add``, ``jobs`` (job, jobs), ``queues`` (stats,
queues, schedules, pause, resume, remove-queue), ``manage`` (retry, cancel, remove),
``insight`` (workers, failures) and ``flows`` (flow). ``session`` and ``output`` are what
they share.
docs/cli.md documents every command, its ``--json`` shape and its exit codes.
"""

from __future__ import annotations

import importlib

from portqueue.cli.base import app, redact

__all__ = ["app", "main", "redact"]

# Imported in the order `portqueue --help` lists their commands.
COMMAND_MODULES = ("database", "worker", "dashboard", "demo", "add", "jobs", "queues", "manage",
                   "insight", "flows")
for _module in COMMAND_MODULES:
    importlib.import_module(f"portqueue.cli.{_module}")


def main() -> None:
    """The ``portqueue`` console script."""
    app(prog_name="portqueue")


if __name__ == "__main__":
    main()
