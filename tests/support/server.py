"""The suite's server, found as users' test runs find theirs (portqueue.testing.server)."""

from portqueue.testing.server import (
    _OWNER,
    EMBEDDED_DIRECTORY,
    claim_embedded_directory,
    dsn_for_database,
    embedded_dsn,
    process_alive,
    release_embedded_directory,
    server_dsn,
)

__all__ = ["EMBEDDED_DIRECTORY", "_OWNER", "claim_embedded_directory", "dsn_for_database",
           "embedded_dsn", "process_alive", "release_embedded_directory", "server_dsn"]
