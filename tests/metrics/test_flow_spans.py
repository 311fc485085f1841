"""Workflows are traced and counted as every add is (docs/metrics.md): a
dependent ``add_job`` is a ``send <queue>`` span on one message, a dependent
``add_jobs``, an ``add_flow`` and a ``publish`` are batch spans (a flow across
queues is a ``send`` span without a destination, a publish names its topic),
every job they add carries the span's trace context, and
``portqueue_jobs_added_total``'s observers count them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from portqueue import PortQueue
from portqueue.metrics import TRACEPARENT, hooks
from tests.support.rows import fetch_one
from tests.support.spans import only, traceparent_of

Db = psycopg.Connection[Any]
BATCH = "messaging.batch.message_count"
DESTINATION = "messaging.destination.name"


def assert_carries(db: Db, schema: str, job_ids: list[str | None], span: Any) -> None:
    for job_id in job_ids:
        row = fetch_one(db, schema, "job", "id = %s", [job_id])
        assert row is not None and row["attrs"] == {TRACEPARENT: traceparent_of(span)}


@pytest.fixture
def added() -> Iterator[Counter[str]]:
    counts: Counter[str] = Counter()
    undo = hooks.observe_added(lambda queue, n: counts.update({queue: n}))
    yield counts
    undo()


def test_dependent_adds_open_the_same_spans_as_plain_ones(
    pq: PortQueue, spans: Any, db: Db, schema: str, added: Counter[str]
) -> None:
    parent = pq.add_job(queue="extract", data=1)
    spans.clear()
    one = pq.add_job(queue="load", data=2, depends_on=[parent.job_id])  # type: ignore[list-item]
    send = only(spans, "send load")
    assert send.attributes["messaging.message.id"] == one.job_id
    assert BATCH not in send.attributes
    assert_carries(db, schema, [one.job_id], send)
    spans.clear()
    many = pq.add_jobs(queue="load", jobs=[{"data": 3, "depends_on": [parent.job_id]},
                                           {"data": 4}])
    batch = only(spans, "send load")
    assert batch.attributes[BATCH] == 2
    assert_carries(db, schema, [r.job_id for r in many], batch)
    assert added == {"extract": 1, "load": 3}


def test_a_flow_is_one_batch_span_named_for_its_queue_or_for_none(
    pq: PortQueue, spans: Any, db: Db, schema: str, added: Counter[str]
) -> None:
    across = pq.add_flow(jobs=[
        {"key": "a", "queue": "extract", "data": 1},
        {"key": "b", "queue": "load", "data": 2, "depends_on": ["a"]}])
    send = only(spans, "send")
    assert send.attributes[BATCH] == 2 and DESTINATION not in send.attributes
    assert_carries(db, schema, [r.job_id for r in across.jobs.values()], send)
    spans.clear()
    within = pq.add_flow(jobs=[{"key": "a", "queue": "steps", "data": 1},
                               {"key": "b", "queue": "steps", "data": 2, "depends_on": ["a"]}])
    send = only(spans, "send steps")
    assert send.attributes[DESTINATION] == "steps" and send.attributes[BATCH] == 2
    assert_carries(db, schema, [r.job_id for r in within.jobs.values()], send)
    assert added == {"extract": 1, "load": 1, "steps": 2}


def test_a_refused_flow_marks_its_span_with_error_type(pq: PortQueue, spans: Any) -> None:
    with pytest.raises(ValueError, match="unknown key"):
        pq.add_flow(jobs=[{"key": "a", "queue": "q", "data": 1, "depends_on": ["nope"]}])
    send = only(spans, "send q")
    assert send.attributes["error.type"] == "portqueue.errors.InvalidArgument"


def test_publish_is_a_batch_span_named_for_its_topic(
    pq: PortQueue, spans: Any, db: Db, schema: str, added: Counter[str]
) -> None:
    pq.subscribe(topic="order.created", queue="emails")
    pq.subscribe(topic="order.created", queue="invoices")
    results = pq.publish(topic="order.created", data={"order": 1})
    send = only(spans, "send order.created")
    assert send.attributes[BATCH] == 2
    assert_carries(db, schema, [r.job_id for r in results], send)
    assert added == {"emails": 1, "invoices": 1}
