"""``manage.py portqueue_migrate``: create or upgrade portqueue's schema for a backend.

The same migration as ``portqueue migrate``, with the backend's DSN and schema,
so a deploy script needs no second copy of the database settings. Safe to run
from many processes at once (the migration takes an advisory lock).
"""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand

from portqueue.contrib.django.management.base import portqueue_backend


class Command(BaseCommand):  # type: ignore[misc]  # Django ships no type hints
    help = "Create or upgrade portqueue's schema for the Django tasks of a PortQueueBackend."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--backend", default="default",
                            help="The TASKS alias whose DSN and SCHEMA to use (default: default).")

    def handle(self, *args: Any, **options: Any) -> None:
        backend = portqueue_backend(options["backend"])
        backend.client.migrate()
        self.stdout.write(f"portqueue: schema {backend.settings.schema!r} is up to date")
