"""The backend's settings: defaults from Django's own database settings, and a
clear ImproperlyConfigured naming the setting for every mistake."""

from __future__ import annotations

import io
import re
from typing import Any

import psycopg
import pytest
from psycopg import sql

pytest.importorskip("django.tasks", reason="Django's tasks framework needs Django >= 6.0 "
                                           "(Python >= 3.12)")

from django.core.exceptions import ImproperlyConfigured
from django.tasks import task_backends
from psycopg.conninfo import conninfo_to_dict

from portqueue.contrib.django import PortQueueBackend
from portqueue.contrib.django.runner import worker_queues

BACKEND = "portqueue.contrib.django.PortQueueBackend"


def backend(**params: Any) -> PortQueueBackend:
    return PortQueueBackend("checked", {"BACKEND": BACKEND, **params})


def test_the_dsn_defaults_to_djangos_database(django_project: None, pg_dsn: str) -> None:
    built = backend(OPTIONS={"SCHEMA": "pq_test"})
    assert built.settings.database == "default" and built.settings.schema == "pq_test"
    assert conninfo_to_dict(built.settings.dsn)["dbname"] == conninfo_to_dict(pg_dsn)["dbname"]
    with psycopg.connect(built.settings.dsn) as conn:  # it really reaches the server
        assert conn.execute("SELECT current_database()").fetchone() == (
            conninfo_to_dict(pg_dsn)["dbname"],)


def test_explicit_options_are_kept(django_project: None) -> None:
    built = backend(QUEUES=["a"], OPTIONS={
        "DSN": "dbname=elsewhere", "SCHEMA": "jobs", "RETRY": {"max_attempts": 3},
        "CLIENT": {"pool_max_size": 2, "instance_key": "web-1"}})
    assert built.settings.dsn == "dbname=elsewhere"
    assert built.settings.retry is not None and built.settings.retry.max_attempts == 3
    assert built.client.instance_key == "web-1" and built.client.schema == "jobs"


@pytest.mark.parametrize(("params", "named"), [
    ({"OPTIONS": {"SHEMA": "x"}}, "['OPTIONS']['SHEMA']: unknown option"),
    ({"OPTIONS": {"SCHEMA": "pg_jobs"}}, "['OPTIONS']['SCHEMA']"),
    ({"OPTIONS": {"SCHEMA": "no spaces"}}, "['OPTIONS']['SCHEMA']"),
    ({"OPTIONS": {"DATABASE": "missing"}}, "['OPTIONS']['DATABASE']: no database 'missing'"),
    ({"OPTIONS": {"RETRY": {"max_attempts": 0}}}, "['OPTIONS']['RETRY']"),
    ({"OPTIONS": {"RETRY": {"tries": 2}}}, "['OPTIONS']['RETRY']"),
    ({"OPTIONS": {"CLIENT": {"schema": "x"}}}, "['OPTIONS']['CLIENT']"),
    ({"OPTIONS": {"CLIENT": {"pool_size": 2}}}, "['OPTIONS']['CLIENT']: "),
    ({"OPTIONS": {"CLIENT": {"pool_max_size": 0}}}, "['OPTIONS']['CLIENT']: pool_max_size"),
    ({"OPTIONS": "SCHEMA=x"}, "['OPTIONS']: must be a dict"),
    ({"QUEUES": "default"}, "['QUEUES']: must be a list"),
    ({"QUEUES": ["ok", ""]}, "['QUEUES']: ''"),
    ({"QUEUES": ["x" * 129]}, "['QUEUES']"),
])
def test_mistakes_name_the_setting(
    django_project: None, params: dict[str, Any], named: str
) -> None:
    with pytest.raises(ImproperlyConfigured) as raised:
        backend(**params)
    assert named in str(raised.value)
    assert str(raised.value).startswith("TASKS['checked']")


def test_workers_need_queue_names(django_project: None) -> None:
    with pytest.raises(ImproperlyConfigured, match="QUEUES'] is empty"):
        worker_queues(backend(QUEUES=[], OPTIONS={"SCHEMA": "pq_test"}), None)
    assert worker_queues(task_backends["default"], None) == ["default", "emails"]
    with pytest.raises(ImproperlyConfigured, match="not in TASKS"):
        worker_queues(task_backends["default"], ["default", "other"])


def test_docs_list_every_option() -> None:
    """docs/django.md's OPTIONS table names exactly the options the backend accepts."""
    from pathlib import Path

    from portqueue.contrib.django.options import OPTION_NAMES

    docs = (Path(__file__).resolve().parents[2] / "docs" / "django.md").read_text("utf-8")
    table = docs[docs.index("`OPTIONS`:"):docs.index("A mistake raises")]
    assert set(re.findall(r"^\| `([A-Z_]+)` \|", table, re.MULTILINE)) == OPTION_NAMES


def test_manage_py_portqueue_migrate(django_project: None, db: psycopg.Connection[Any]) -> None:
    from django.conf import settings
    from django.core.management import CommandError, call_command
    from django.test import override_settings

    schema = "pq_django_migrate"
    db.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    fresh = {"BACKEND": BACKEND, "OPTIONS": {"SCHEMA": schema}}
    dummy = {"BACKEND": "django.tasks.backends.dummy.DummyBackend"}
    try:
        with override_settings(TASKS={**settings.TASKS, "fresh": fresh, "dummy": dummy}):
            out = io.StringIO()
            call_command("portqueue_migrate", backend="fresh", stdout=out)
            assert f"schema {schema!r} is up to date" in out.getvalue()
            with pytest.raises(CommandError, match="not a PortQueueBackend"):
                call_command("portqueue_migrate", backend="dummy")
        row = db.execute("SELECT to_regclass(%s)", [f"{schema}.job"]).fetchone()
        assert row is not None and row[0] is not None
    finally:
        db.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
