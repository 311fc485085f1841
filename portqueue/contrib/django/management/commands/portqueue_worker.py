"""``manage.py portqueue_worker``: run the tasks of a ``PortQueueBackend``.

SIGTERM stops claiming, waits for running tasks (up to ``--grace-seconds``) and
exits 0; a second signal, or SIGINT, aborts and puts unfinished jobs back to
pending without spending an attempt (as ``portqueue worker``).
"""

from __future__ import annotations

import logging
from argparse import ArgumentParser
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError

from portqueue.contrib.django.management.base import portqueue_backend
from portqueue.contrib.django.runner import worker_client
from portqueue.errors import InvalidArgument, PortQueueError


class Command(BaseCommand):  # type: ignore[misc]  # Django ships no type hints
    help = "Run a portqueue worker for the Django tasks of a PortQueueBackend."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--backend", default="default",
                            help="The TASKS alias to run (default: default).")
        parser.add_argument("--queues", default=None,
                            help="Comma-separated queues (default: the backend's QUEUES).")
        parser.add_argument("--concurrency", type=int, default=1,
                            help="Tasks run at once per queue (default: 1).")
        parser.add_argument("--poll-interval", type=float, default=1.0,
                            help="Seconds between polls when no NOTIFY arrives (default: 1).")
        parser.add_argument("--grace-seconds", type=float, default=30.0,
                            help="How long SIGTERM waits for running tasks (default: 30).")
        parser.add_argument("--no-scheduler", action="store_true",
                            help="Do not run portqueue's scheduler in this process.")
        parser.add_argument("--no-maintenance", action="store_true",
                            help="Do not run maintenance (lease rescue, pruning) here.")

    def handle(self, *args: Any, **options: Any) -> None:
        # One line per worker state change, unless LOGGING already configured logging.
        logging.basicConfig(level=logging.INFO,
                            format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        backend = portqueue_backend(options["backend"])
        queues = options["queues"]
        try:
            client = worker_client(
                backend, concurrency=options["concurrency"],
                queues=[q.strip() for q in (queues or "").split(",") if q.strip()] or None)
            with client:
                client.run(
                    poll_interval=options["poll_interval"],
                    grace_seconds=options["grace_seconds"],
                    scheduler=not options["no_scheduler"],
                    maintenance=not options["no_maintenance"])
        except (ImproperlyConfigured, InvalidArgument) as exc:
            raise CommandError(str(exc)) from None
        except PortQueueError as exc:
            raise CommandError(f"worker failed: {exc}", returncode=1) from None
