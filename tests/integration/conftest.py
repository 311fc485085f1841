"""Fixtures shared by the worker tests (tests/integration/test_worker_*.py):
a table handlers write to. The database, schema, client and in-process worker
fixtures (``harness``, ``aharness``) come from tests/conftest.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

Db = psycopg.Connection[Any]


@pytest.fixture
def effects(db: Db) -> Iterator[str]:
    """A table handlers write to inside ``job.transaction()``."""
    db.execute("DROP TABLE IF EXISTS public.worker_effects")
    db.execute("CREATE TABLE public.worker_effects (job_id uuid, note text)")
    yield "public.worker_effects"
    # A transaction a test left open would make this DROP wait forever: fail
    # the test instead of hanging the run.
    db.execute("SET lock_timeout = '10s'")
    db.execute("DROP TABLE IF EXISTS public.worker_effects")
