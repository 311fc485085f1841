"""What CI's legs (.ci/run) select beyond README's test command."""

from __future__ import annotations

# Slow tests whose proof depends on the server's executor or catalog, so CI's
# pg18 leg runs them too (it deselects every other slow test: they ran on
# pg15). Listed here rather than marked in place; tests/conftest.py marks
# their slow tests every_major. Each file -> why.
EVERY_MAJOR: dict[str, str] = {
    "tests/faults/test_races.py": "row locks and ON CONFLICT between concurrent transactions",
    "tests/faults/test_rescuer_pause.py": "READ COMMITTED's re-check of rows updated meanwhile",
    "tests/faults/test_migrate_concurrently.py": "DDL locks of a migration against live workers",
    "tests/migrations/test_concurrent_migrate.py": "DDL and catalog locks of racing migrations",
}
