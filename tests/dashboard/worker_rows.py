"""Worker rows written by the test, for states a live worker does not hold
still (a stale heartbeat, a hostile host name, many hosts)."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
from psycopg import sql


def insert_worker(db: psycopg.Connection[Any], schema: str, *, hostname: str, pid: int = 4242,
                  queues: list[str] | None = None, concurrency: int = 3,
                  instance_key: str | None = None, seen_ago_seconds: int = 0) -> str:
    worker_id = str(uuid.uuid4())
    db.execute(
        sql.SQL("INSERT INTO {} (id, hostname, pid, queues, concurrency, instance_key, "
                "last_seen_at) VALUES (%s, %s, %s, %s, %s, %s, "
                "now() - make_interval(secs => %s))").format(sql.Identifier(schema, "worker")),
        (worker_id, hostname, pid, queues or [], concurrency, instance_key, seen_ago_seconds))
    return worker_id
