"""``manage.py portqueue_migrate``: create or upgrade portqueue's schema for a backend.

The same migration as ``portqueue migrate``, with the backend's DSN and schema,
so a deploy script needs no second copy of the database settings. Safe to run
from many processes at once (the migration takes an advisory lock).
"""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.tasks import task_backends
from django.tasks.exceptions import InvalidTaskBackend

from portqueue.contrib.django.backend import PortQueueBackend


class Command(BaseCommand):  # type: ignore[misc]  # Django ships no type hints
    help = "Create or upgrade portqueue's schema for the Django tasks of a PortQueueBackend."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--backend", default="default",
                            help="The TASKS alias whose DSN and SCHEMA to use (default: default).")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            backend = task_backends[options["backend"]]
        except InvalidTaskBackend as exc:
            raise CommandError(str(exc)) from None
        if not isinstance(backend, PortQueueBackend):
            raise CommandError(f"--backend {options['backend']!r} is a "
                               f"{type(backend).__name__}, not a PortQueueBackend")
        backend.client.migrate()
        self.stdout.write(f"portqueue: schema {backend.settings.schema!r} is up to date")
