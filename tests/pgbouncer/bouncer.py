"""A private PgBouncer in transaction mode, in front of the test server.

Each test process that needs one starts its own: its own ini, port and
directory, auth_type=trust (the test servers trust local connections), and
every database of the server reachable under its own name (the ``*``
fallback entry). Debian's binary refuses to run as root, so under root it is
told to switch to an unprivileged user with ``-u``.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tests.support.ports import free_port
from tests.support.waiting import wait_until

PGBOUNCER = os.environ.get("PORTQUEUE_TEST_PGBOUNCER_BIN", "/usr/sbin/pgbouncer")
# Server connections per (database, user): enough that a worker (pool,
# handlers, heartbeat) and a test's own clients rarely wait for one, few
# enough that two test processes' PgBouncers leave the shared server's
# max_connections (100) to everyone else.
POOL_SIZE = 12


def available() -> str | None:
    """None when PgBouncer can run here, else why not (a skip reason)."""
    if not (os.access(PGBOUNCER, os.X_OK) or shutil.which(PGBOUNCER)):
        return f"PgBouncer is not installed ({PGBOUNCER}; Debian package `pgbouncer`)"
    return None


@dataclass(frozen=True)
class Bouncer:
    host: str
    port: int
    server_host: str
    server_port: str
    log_path: Path

    def route(self, dsn: str) -> str:
        """``dsn`` through this PgBouncer when it points at the server behind
        it; any other DSN (already routed, another server) is returned as is."""
        params = conninfo_to_dict(dsn)
        if (str(params.get("host", "")), str(params.get("port", "5432"))) != (
                self.server_host, self.server_port):
            return dsn
        return make_conninfo(dsn, host=self.host, port=str(self.port))

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def warm(self, dsn: str, connections: int = 3) -> None:
        """Make PgBouncer open ``connections`` server connections for ``dsn``'s
        database now (transactions held at once), so round robin has several
        to rotate through from the first statement on."""
        with contextlib.ExitStack() as stack:
            for _ in range(connections):
                conn = stack.enter_context(psycopg.connect(self.route(dsn), prepare_threshold=None))
                conn.execute("SELECT 1")  # opens a transaction: holds a server connection

    def client_logins(self, database: str | None = None) -> int:
        """Client logins PgBouncer logged (to ``database``, if given)."""
        marker = "login attempt: db=" + (f"{database} " if database else "")
        return self.log().count(marker)


def _ini(directory: Path, port: int, server_host: str, server_port: str) -> Path:
    users = directory / "users.txt"
    # trust ignores the password, but the user must be listed.
    users.write_text('"postgres" ""\n')
    ini = directory / "pgbouncer.ini"
    ini.write_text("\n".join([
        "[databases]",
        f"* = host={server_host} port={server_port}",
        "[pgbouncer]",
        "listen_addr = 127.0.0.1",
        f"listen_port = {port}",
        "unix_socket_dir =",
        "auth_type = trust",
        f"auth_file = {users}",
        "pool_mode = transaction",
        f"default_pool_size = {POOL_SIZE}",
        # Hand consecutive transactions of one client to different server
        # connections, as a busy PgBouncer would: anything that leans on
        # session state (a prepared statement, a SET, a session lock) breaks
        # here at once instead of only under production load.
        "server_round_robin = 1",
        "min_pool_size = 2",
        "reserve_pool_size = 4",
        # Idle server connections go back to the server soon, not after 10 min.
        "server_idle_timeout = 15",
        "max_client_conn = 2000",
        # psycopg and SQLAlchemy may send it; PgBouncer would refuse the login.
        "ignore_startup_parameters = extra_float_digits",
        "server_login_retry = 1",
        "",
    ]))
    for path in (directory, users, ini):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return ini


def _user_switch(server_host: str) -> list[str]:
    if os.geteuid() != 0:
        return []
    if server_host.startswith("/"):
        # A Unix-socket server (the embedded one) keeps its socket in a
        # directory only its own user may enter: run PgBouncer as that user.
        owner = os.stat(server_host).st_uid
        if owner != 0:
            return ["-u", pwd.getpwuid(owner).pw_name]
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return ["-u", pwd.getpwnam(name).pw_name]
    raise RuntimeError("running as root and no unprivileged user for PgBouncer's -u")


@contextlib.contextmanager
def running_bouncer(server_dsn: str) -> Iterator[Bouncer]:
    """Start PgBouncer in front of the server ``server_dsn`` points at; stop it after."""
    params = conninfo_to_dict(server_dsn)
    server_host = str(params.get("host") or "127.0.0.1")
    server_port = str(params.get("port") or "5432")
    directory = Path(tempfile.mkdtemp(prefix="portqueue-pgbouncer-"))
    port = free_port()
    ini = _ini(directory, port, server_host, server_port)
    log_path = directory / "pgbouncer.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [PGBOUNCER, *_user_switch(server_host), str(ini)], stdout=log, stderr=subprocess.STDOUT)
    bouncer = Bouncer("127.0.0.1", port, server_host, server_port, log_path)
    try:
        wait_until(lambda: _answers(bouncer, server_dsn, process), timeout=15,
                   what=f"PgBouncer on port {port}")
        yield bouncer
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(directory, ignore_errors=True)


def _answers(bouncer: Bouncer, server_dsn: str, process: subprocess.Popen[bytes]) -> bool:
    if process.poll() is not None:
        raise RuntimeError(f"PgBouncer exited with {process.returncode}:\n{bouncer.log()}")
    try:
        with psycopg.connect(bouncer.route(server_dsn), connect_timeout=2,
                             prepare_threshold=None) as conn:
            conn.execute("SELECT 1")
    except psycopg.OperationalError:
        return False
    return True
