"""A client for ``portqueue worker tests.security.app:pq``: its DSN comes from
``PORTQUEUE_DSN`` (the test passes one with a password); one handler, so the
worker has a queue to claim from."""

from __future__ import annotations

import os
from typing import Any

from portqueue import PortQueue

pq = PortQueue(os.environ["PORTQUEUE_DSN"], schema=os.environ.get("PORTQUEUE_SCHEMA", "pq_test"))


@pq.handler("secrets")
def handle(job: Any) -> None:
    return None
