"""The test Django project (tests/django/project) on the test run's own database.

Django's settings are per process. When nothing configured Django yet, the
project's settings module does; when another suite already did (the tx
conformance suite configures a bare Django on the same database), the
project's apps and TASKS are laid over it with ``override_settings``.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from typing import Any

import pytest
from psycopg.conninfo import conninfo_to_dict

from portqueue import PortQueue


def _project_settings(pg_dsn: str, schema: str) -> dict[str, Any]:
    os.environ["PORTQUEUE_DJANGO_DSN"] = pg_dsn
    os.environ["PORTQUEUE_DJANGO_SCHEMA"] = schema
    module = importlib.import_module("tests.django.project.settings")
    return {name: getattr(module, name) for name in dir(module) if name.isupper()}


@pytest.fixture(scope="session")
def django_project(pg_dsn: str, migrated_schema: str) -> Iterator[None]:
    import django
    from django.conf import settings
    from django.core.management import call_command
    from django.test import override_settings

    values = _project_settings(pg_dsn, migrated_schema)
    override = None
    if not settings.configured:
        settings.configure(**values)
        django.setup()
    else:
        ours = conninfo_to_dict(pg_dsn)["dbname"]
        assert settings.DATABASES["default"]["NAME"] == ours, "Django is set up on another db"
        override = override_settings(
            INSTALLED_APPS=values["INSTALLED_APPS"], TASKS=values["TASKS"],
            USE_TZ=True, TIME_ZONE="UTC", DEFAULT_AUTO_FIELD=values["DEFAULT_AUTO_FIELD"])
        override.enable()
    # The shop app has no migrations: syncdb creates its table, as for a new project.
    call_command("migrate", run_syncdb=True, verbosity=0)
    try:
        yield
    finally:
        from django.db import connections

        from portqueue.contrib.django.backend import close_shared_clients

        close_shared_clients()
        connections.close_all()
        if override is not None:
            override.disable()


@pytest.fixture
def shop(django_project: None, schema: str) -> str:
    """No orders and no jobs at the start of a test; returns portqueue's schema."""
    from tests.django.shop.models import Order

    Order.objects.all().delete()
    return schema


@pytest.fixture
def worker(shop: str) -> Iterator[PortQueue]:
    """An in-process worker running the ``default`` backend's tasks (queues default, emails)."""
    from django.tasks import task_backends

    from portqueue.contrib.django.runner import worker_client
    from tests.support.workers import wait_for_worker_threads_to_end

    client = worker_client(task_backends["default"], concurrency=2)
    client.start(scheduler=False, maintenance=False, poll_interval=0.5)
    try:
        yield client
    finally:
        client.stop(abort=True)
        client.close()
        wait_for_worker_threads_to_end()


@pytest.fixture
def tasks(shop: str) -> Any:
    """The shop app's task functions (importable once Django is set up)."""
    return importlib.import_module("tests.django.shop.tasks")


@pytest.fixture
def orders(shop: str) -> Any:
    """The shop's ``Order`` model."""
    from tests.django.shop.models import Order

    return Order
