"""portqueue as a backend of Django's tasks framework (``django.tasks``, Django ≥ 6.0).

``settings.TASKS = {"default": {"BACKEND": "portqueue.contrib.django.PortQueueBackend"}}``
makes ``@task`` functions enqueue as portqueue jobs inside the caller's
``transaction.atomic()``. Add ``"portqueue.contrib.django"`` to
``INSTALLED_APPS`` for ``manage.py portqueue_worker`` and ``portqueue_migrate``.
See docs/django.md.
"""

from portqueue.contrib.django.backend import PortQueueBackend

__all__ = ["PortQueueBackend"]
