"""The app ``portqueue worker tests.metrics.stall_app:pq`` runs in
tests/metrics/test_start_latency.py, with ``PORTQUEUE_DSN`` and
``PORTQUEUE_SCHEMA`` in its environment: its handler holds the job (a short
lease) until the test kills the process, leaving a lease to lapse."""

from __future__ import annotations

import os
import threading

from portqueue import PortQueue
from portqueue.worker.job import Job

QUEUE = "m-stall"
LEASE_SECONDS = 2
HOLD_SECONDS = 60.0  # bounded: the test kills the process long before

pq = PortQueue(os.environ["PORTQUEUE_DSN"], schema=os.environ["PORTQUEUE_SCHEMA"])


@pq.handler(QUEUE, lease_seconds=LEASE_SECONDS, retry={"max_attempts": 2})
def hold(job: Job) -> None:
    threading.Event().wait(HOLD_SECONDS)
