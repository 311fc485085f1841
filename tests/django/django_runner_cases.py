"""Cases for Django's own test runner, not pytest (``manage.py test
tests.django.django_runner_cases``; driven by test_django_test_runner.py).

The shop's tasks are imported before the runner creates its test database, so
the backend is built while Django's settings still name the main database:
these cases check that it reads and writes the test database all the same,
and that its pool, used here, does not stop the runner dropping it."""

from __future__ import annotations

from django.core.management import call_command
from django.db import connection
from django.tasks import TaskResultStatus
from django.test import TransactionTestCase

from tests.django.shop import tasks


class BackendOnTheTestDatabase(TransactionTestCase):  # type: ignore[misc]
    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        # A new test database has no portqueue schema: as a project's own tests would.
        call_command("portqueue_migrate", verbosity=0)

    def test_enqueue_and_get_result_use_the_test_database(self) -> None:
        assert connection.settings_dict["NAME"].startswith("test_")
        result = tasks.add.enqueue(1, 2)  # autocommit: visible to the backend's pool
        reread = tasks.add.get_result(result.id)  # read through the pool
        assert reread.status == TaskResultStatus.READY
        assert reread.enqueued_at == result.enqueued_at
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity "
                           "WHERE datname = current_database() AND pid <> pg_backend_pid()")
            (others,) = cursor.fetchone()
        assert others >= 1, "the backend's pool should hold a connection here"
