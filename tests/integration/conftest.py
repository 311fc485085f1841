"""Fixtures shared by integration tests: a table handlers write to (the worker
tests), and a caller's transaction per ``tx=`` adapter (the conformance suite
and every test of an add path under ``tx=``). The database, schema, client and
in-process worker fixtures (``harness``, ``aharness``) come from tests/conftest.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.support.tx_adapters import (
    HARNESSES,
    CallerTransaction,
    Django,
    create_orders_table,
    django_database,
)

Db = psycopg.Connection[Any]
DJANGO_ALIAS = "portqueue_tx"


@pytest.fixture(scope="session")
def django_alias(pg_dsn: str) -> str:
    """A Django database alias on the test database, configured once per process.

    When nothing configured Django yet, this suite does (``default``); when
    another module already did, the suite adds an alias of its own rather than
    touch a configuration it does not own."""
    # Django 6 (the tasks backend's) needs Python >= 3.12; the dev extra skips
    # it on older interpreters, and so do these cases.
    django = pytest.importorskip("django")
    from django.conf import settings

    database = django_database(pg_dsn)
    if not settings.configured:
        settings.configure(
            DATABASES={"default": database},
            INSTALLED_APPS=[],
            USE_TZ=True,
            TIME_ZONE="UTC",
        )
        django.setup()
        return "default"
    from django.db import connections

    if DJANGO_ALIAS not in connections.settings:
        # configure_settings fills in Django's defaults (it insists on a
        # "default" entry, a placeholder here: only our alias is kept).
        configured = connections.configure_settings({"default": {}, DJANGO_ALIAS: database})
        connections.settings[DJANGO_ALIAS] = configured[DJANGO_ALIAS]
    return DJANGO_ALIAS


@pytest.fixture
def orders(db: psycopg.Connection[Any]) -> None:
    create_orders_table(db)


@pytest.fixture(params=list(HARNESSES))
def caller(
    request: pytest.FixtureRequest, pg_dsn: str, schema: str, orders: None
) -> Iterator[CallerTransaction]:
    """One caller's transaction per adapter; closed (and rolled back if open) after the test."""
    harness_type = HARNESSES[request.param]
    if harness_type is Django:
        harness: CallerTransaction = Django(
            pg_dsn, schema, using=request.getfixturevalue("django_alias"))
    else:
        harness = harness_type(pg_dsn, schema)
    try:
        yield harness
    finally:
        harness.close()


@pytest.fixture
def effects(db: Db) -> Iterator[str]:
    """A table handlers write to inside ``job.transaction()``."""
    db.execute("DROP TABLE IF EXISTS public.worker_effects")
    db.execute("CREATE TABLE public.worker_effects (job_id uuid, note text)")
    yield "public.worker_effects"
    # A transaction a test left open would make this DROP wait forever: fail
    # the test instead of hanging the run.
    db.execute("SET lock_timeout = '10s'")
    db.execute("DROP TABLE IF EXISTS public.worker_effects")
