"""The app ``portqueue worker tests.metrics.app:pq --metrics-port N`` runs in
tests/metrics/test_worker_cli.py, with ``PORTQUEUE_DSN`` and
``PORTQUEUE_SCHEMA`` in its environment. The handler adds one follow-up job,
so the worker process itself counts jobs added."""

from __future__ import annotations

import os
from typing import Any

from portqueue import PortQueue
from portqueue.worker.job import Job

pq = PortQueue(os.environ["PORTQUEUE_DSN"], schema=os.environ["PORTQUEUE_SCHEMA"])


@pq.handler("cli-metrics", concurrency=2)
def handle(job: Job) -> Any:
    pq.add_job(queue="cli-followup", data=job.data)
    return job.data
