"""Settings of the test project (``tests/django/manage.py``, worker subprocesses).

The database is the one in ``PORTQUEUE_DJANGO_DSN`` (the test run's own
database), portqueue's tables are in ``PORTQUEUE_DJANGO_SCHEMA``. The test
process itself configures Django from this module too (tests/django/conftest.py).
"""

import os

from psycopg.conninfo import conninfo_to_dict


def _database(dsn: str) -> dict[str, object]:
    """A DATABASES entry for a libpq DSN (URL or key=value), as a project reading
    its database from the environment would write it."""
    params = {key: str(value) for key, value in conninfo_to_dict(dsn).items()}
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": params.pop("dbname", ""), "USER": params.pop("user", ""),
        "PASSWORD": params.pop("password", ""), "HOST": params.pop("host", ""),
        "PORT": params.pop("port", ""), "OPTIONS": params,
    }


SECRET_KEY = "portqueue-tests-only"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = ["portqueue.contrib.django", "tests.django.shop"]

DATABASES = {"default": _database(os.environ["PORTQUEUE_DJANGO_DSN"])}

_SCHEMA = os.environ.get("PORTQUEUE_DJANGO_SCHEMA", "portqueue")

TASKS = {
    "default": {
        "BACKEND": "portqueue.contrib.django.PortQueueBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {"SCHEMA": _SCHEMA, "CLIENT": {"pool_max_size": 4}},
    },
    # Tasks enqueued through this alias get two attempts.
    "retrying": {
        "BACKEND": "portqueue.contrib.django.PortQueueBackend",
        "QUEUES": ["default"],
        "OPTIONS": {"SCHEMA": _SCHEMA, "RETRY": {"max_attempts": 2}},
    },
}
