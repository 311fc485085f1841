"""The Django app: installs ``manage.py portqueue_worker`` and ``portqueue_migrate``;
it has no models."""

from django.apps import AppConfig


class PortQueueConfig(AppConfig):  # type: ignore[misc]  # Django ships no type hints
    name = "portqueue.contrib.django"
    label = "portqueue"
    verbose_name = "portqueue"
