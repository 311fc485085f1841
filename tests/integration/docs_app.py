"""The app the subprocess tests run ``portqueue worker`` on, in place of the
docs' ``myapp.jobs:pq`` (tests/integration/test_docs_examples.py,
tests/integration/test_worker_not_migrated.py). ``PORTQUEUE_DSN`` and
``PORTQUEUE_SCHEMA`` come from the environment; ``pq`` is sync, ``apq`` async,
with handlers for the queues the docs' examples name."""

from __future__ import annotations

import os
from typing import Any

from portqueue import AsyncPortQueue, PortQueue

DSN = os.environ["PORTQUEUE_DSN"]
SCHEMA = os.environ.get("PORTQUEUE_SCHEMA", "portqueue")
QUEUES = ("emails", "reports", "reindex", "fulfillment", "default")

pq = PortQueue(DSN, schema=SCHEMA)
apq = AsyncPortQueue(DSN, schema=SCHEMA)


def handle(job: Any) -> Any:
    return job.data


async def handle_async(job: Any) -> Any:
    return job.data


for _queue in QUEUES:
    pq.handler(_queue)(handle)
    apq.handler(_queue)(handle_async)
