"""What the ``portqueue_*`` management commands share."""

from __future__ import annotations

from django.core.management.base import CommandError
from django.tasks import task_backends
from django.tasks.exceptions import InvalidTaskBackend

from portqueue.contrib.django.backend import PortQueueBackend


def portqueue_backend(alias: str) -> PortQueueBackend:
    """The TASKS backend named ``alias`` (``--backend``); a ``CommandError`` when
    there is none or it is not a ``PortQueueBackend``."""
    try:
        backend = task_backends[alias]
    except InvalidTaskBackend as exc:
        raise CommandError(str(exc)) from None
    if not isinstance(backend, PortQueueBackend):
        raise CommandError(f"--backend {alias!r} is a "
                           f"{type(backend).__name__}, not a PortQueueBackend")
    return backend
