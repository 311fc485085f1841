"""SPEC §10 with §8: a pull consumer's ``fetch_jobs`` honours the queue's
flow-control limits as a worker's claim does (it runs the same limited claim),
and a slot its ``complete_job`` frees is fetched again."""

from __future__ import annotations

from typing import Any

import psycopg

from portqueue import PortQueue
from tests.support.rows import count_jobs

Db = psycopg.Connection[Any]


def test_fetch_stops_at_the_global_limit_and_a_completion_frees_a_slot(
        client: PortQueue, db: Db, schema: str) -> None:
    client.set_queue_limits(queue="pull-limited", global_concurrency=2)
    for n in range(5):
        client.add_job(queue="pull-limited", data={"n": n})

    first = client.fetch_jobs(queue="pull-limited", limit=10)

    assert len(first) == 2, "no more than global_concurrency at once"
    assert client.fetch_jobs(queue="pull-limited", limit=10) == [], "the limit is reached"
    assert client.complete_job(job_id=first[0].job_id, lease_token=first[0].lease_token)
    assert len(client.fetch_jobs(queue="pull-limited", limit=10)) == 1, "one slot freed"
    waiting = count_jobs(db, schema, "status = 'pending' AND attempt = 0")
    assert waiting == 2, "the rest wait, no attempt spent"


def test_fetch_takes_one_job_per_partition_key(client: PortQueue) -> None:
    client.set_queue_limits(queue="pull-keyed", partition_concurrency=1)
    for key in ("a", "a", "b", "b"):
        client.add_job(queue="pull-keyed", data={"key": key}, partition_key=key)

    fetched = client.fetch_jobs(queue="pull-keyed", limit=10)

    assert sorted(job.data["key"] for job in fetched) == ["a", "b"], "one per key"
