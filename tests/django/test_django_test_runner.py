"""Django's test runner with the backend in use: ``manage.py test`` creates its
test database, the backend works on it and the runner drops it at the end, the
backend's pool being closed first without any setting of the project's; and
the two mechanisms that make it so, each on its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

pytest.importorskip("django.tasks", reason="Django's tasks framework needs Django >= 6.0 "
                                           "(Python >= 3.12)")

REPO = Path(__file__).resolve().parents[2]


def test_the_runner_creates_uses_and_drops_its_test_database(pg_dsn: str, db: Any) -> None:
    test_database = "test_" + str(conninfo_to_dict(pg_dsn)["dbname"])
    env = {key: value for key, value in os.environ.items() if not key.startswith("PORTQUEUE_")}
    env.update(PORTQUEUE_DJANGO_DSN=pg_dsn, PORTQUEUE_DJANGO_SCHEMA="portqueue",
               DJANGO_SETTINGS_MODULE="tests.django.project.settings", PYTHONPATH=str(REPO))
    try:
        run = subprocess.run(
            [sys.executable, "tests/django/manage.py", "test", "--noinput", "-v", "2",
             "tests.django.django_runner_cases"],
            cwd=REPO, env=env, text=True, capture_output=True, timeout=120, check=False)
        output = run.stdout + run.stderr
        assert "being accessed by other users" not in output
        assert run.returncode == 0, output
        assert "Ran 1 test" in output and "OK" in output, output
        assert f"Destroying test database for alias 'default' ('{test_database}')" in output
        dropped = db.execute("SELECT NOT EXISTS (SELECT FROM pg_database WHERE datname = %s)",
                             [test_database]).fetchone()
        assert dropped == (True,)
    finally:
        # A failed run must not leave it behind for the next one.
        db.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
            sql.Identifier(test_database)))


def test_djangos_database_less_connection_closes_the_pool_and_the_next_use_reopens(
    shop: str, tasks: Any
) -> None:
    from django.db import connection
    from django.tasks import task_backends

    backend = task_backends["default"]
    result = tasks.add.enqueue(1, 1)
    used = backend.client
    assert backend.get_result(result.id).id == result.id
    # What the runner opens to create or drop a test database.
    with connection._nodb_cursor():
        pass
    assert backend.client is not used
    assert backend.get_result(result.id).enqueued_at == result.enqueued_at


def test_without_dsn_the_backend_follows_the_databases_current_name(
    django_project: None, pg_dsn: str
) -> None:
    from django.db import connections

    from portqueue.contrib.django import PortQueueBackend

    backend = "portqueue.contrib.django.PortQueueBackend"
    following = PortQueueBackend("following", {"BACKEND": backend})
    pinned = PortQueueBackend("pinned", {"BACKEND": backend, "OPTIONS": {"DSN": pg_dsn}})
    database = connections["default"].settings_dict
    name = database["NAME"]
    before = following.client
    database["NAME"] = "test_" + name  # as the runner renames it, in place
    try:
        assert conninfo_to_dict(following.current_settings().dsn)["dbname"] == "test_" + name
        assert following.client is not before  # the pool for the renamed database
        assert pinned.current_settings().dsn == pg_dsn
    finally:
        database["NAME"] = name
    assert conninfo_to_dict(following.current_settings().dsn)["dbname"] == name
    assert following.client is before
