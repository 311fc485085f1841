"""``portqueue worker portqueue.contrib.django.worker:app``: the Django tasks worker
for the portqueue CLI.

Importing this module sets Django up (``DJANGO_SETTINGS_MODULE`` must be set)
and builds ``app``, a ``PortQueue`` running the tasks of the backend named by
``PORTQUEUE_DJANGO_BACKEND`` (default ``"default"``) on its ``QUEUES``; the
CLI's ``--queues`` and ``--concurrency`` narrow and size them.
"""

from __future__ import annotations

import os

import django

django.setup()

from django.core.exceptions import ImproperlyConfigured  # noqa: E402  (after setup)
from django.tasks import task_backends  # noqa: E402

from portqueue.contrib.django.backend import PortQueueBackend  # noqa: E402
from portqueue.contrib.django.runner import worker_client  # noqa: E402

BACKEND_ALIAS = os.environ.get("PORTQUEUE_DJANGO_BACKEND", "default")

_backend = task_backends[BACKEND_ALIAS]
if not isinstance(_backend, PortQueueBackend):
    raise ImproperlyConfigured(
        f"TASKS[{BACKEND_ALIAS!r}] is a {type(_backend).__name__}, not a PortQueueBackend")

app = worker_client(_backend)
