"""What CI's legs (.ci/run) select beyond README's test command."""

from __future__ import annotations

# Files whose every test spawns worker processes (the ``slow`` marker's
# meaning) without saying so in the file: tests/conftest.py marks them slow,
# so they run once, like the others. Each file -> what it spawns.
SPAWNS_PROCESSES: dict[str, str] = {
    "tests/faults/test_ambiguous_commit.py": "workers behind a proxy that drops a commit's reply",
    "tests/faults/test_blackhole.py": "workers whose LISTEN connection is black-holed",
    "tests/faults/test_blackhole_roles.py": "workers with one connection role black-holed",
    "tests/faults/test_kill.py": "workers killed with SIGKILL and SIGSTOP",
    "tests/faults/test_many.py": "worker fleets draining 600 jobs",
    "tests/faults/test_pg_restart.py": "workers whose sessions are terminated",
    "tests/faults/test_rescuer_race.py": "five rescuer processes",
    "tests/faults/test_shutdown.py": "workers stopped by signals",
}

# Slow tests whose proof depends on the server's executor or catalog, so CI's
# pg18 leg runs them too (it deselects every other slow test: they ran on
# pg15). Listed here rather than marked in place; tests/conftest.py marks
# their slow tests every_major. Each file -> why.
EVERY_MAJOR: dict[str, str] = {
    "tests/faults/test_races.py": "row locks and ON CONFLICT between concurrent transactions",
    "tests/faults/test_rescuer_pause.py": "READ COMMITTED's re-check of rows updated meanwhile",
    "tests/faults/test_rescuer_race.py": "concurrent rescuers' row locks on one lapsed job",
    "tests/faults/test_migrate_concurrently.py": "DDL locks of a migration against live workers",
    "tests/migrations/test_concurrent_migrate.py": "DDL and catalog locks of racing migrations",
}
