"""The spans follow OpenTelemetry's messaging semantic conventions: named
``{operation} {queue}`` (``send emails``, ``process emails``) with the
conventions' operation names and types, ``messaging.batch.message_count`` on
``add_jobs`` only, ``messaging.message.id`` on single-job spans,
``error.type`` on a span whose operation raised, and ``server.address`` /
``server.port`` from the DSN. Recorded by the OpenTelemetry SDK's in-memory
exporter, from real adds and a real worker."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from opentelemetry.trace import SpanKind, StatusCode
from psycopg.conninfo import conninfo_to_dict

from portqueue import AsyncPortQueue, PauseMode, PortQueue, QueuePausedError
from portqueue.metrics import tracing
from tests.support.waiting import wait_until, wait_until_async
from tests.support.workers import AsyncHarness, SyncHarness, finished_row, wait_gate

Db = psycopg.Connection[Any]
BATCH = "messaging.batch.message_count"
MESSAGE_ID = "messaging.message.id"


class Bounced(Exception):
    pass


def server_of(dsn: str) -> dict[str, Any]:
    params = conninfo_to_dict(dsn)
    return {"server.address": params["host"], "server.port": int(params.get("port") or 5432)}


def finished(spans: Any, name: str) -> list[Any]:
    return [span for span in spans.get_finished_spans() if span.name == name]


def test_add_job_is_a_send_span_on_one_message(
    pq: PortQueue, spans: Any, pg_dsn: str
) -> None:
    job_id = pq.add_job(queue="emails", data={"to": "a@example.com"}).job_id
    (send,) = finished(spans, "send emails")
    assert send.kind is SpanKind.PRODUCER
    assert dict(send.attributes) == {
        "messaging.system": "portqueue", "messaging.operation.name": "send",
        "messaging.operation.type": "send", "messaging.destination.name": "emails",
        MESSAGE_ID: job_id, "portqueue.deduplicated": False, **server_of(pg_dsn)}
    assert BATCH not in send.attributes
    assert send.status.status_code is StatusCode.UNSET


def test_add_jobs_is_a_send_span_on_a_batch(pq: PortQueue, spans: Any) -> None:
    pq.add_job(queue="emails", data={}, idempotency_key="sent-before")
    spans.clear()
    pq.add_jobs(queue="emails", jobs=[{"data": 1}, {"data": 2, "idempotency_key": "sent-before"}])
    pq.add_jobs(queue="emails", jobs=[{"data": 3}])
    first, second = finished(spans, "send emails")
    assert first.attributes[BATCH] == 2 and first.attributes["portqueue.deduplicated_count"] == 1
    # A batch of one is still the batch API: counted, and no single id.
    assert second.attributes[BATCH] == 1 and second.attributes["portqueue.deduplicated_count"] == 0
    for batch in (first, second):
        assert MESSAGE_ID not in batch.attributes
        assert batch.attributes["messaging.operation.name"] == "send"


def test_a_refused_add_marks_its_span_with_error_type(pq: PortQueue, spans: Any) -> None:
    pq.add_job(queue="paused-mail", data={})
    pq.pause_queue(queue="paused-mail", mode=PauseMode.ALL)
    spans.clear()
    with pytest.raises(QueuePausedError):
        pq.add_job(queue="paused-mail", data={})
    (send,) = finished(spans, "send paused-mail")
    assert send.attributes["error.type"] == "portqueue.errors.QueuePausedError"
    assert send.status.status_code is StatusCode.ERROR
    assert MESSAGE_ID not in send.attributes
    (event,) = send.events
    assert event.name == "exception"


def test_the_worker_processes_in_process_spans_and_names_a_failures_type(
    harness: SyncHarness, spans: Any, db: Db, schema: str
) -> None:
    pq = harness.pq

    @pq.handler("emails", retry={"max_attempts": 2})
    def handler(job: Any) -> str:
        if job.attempt == 1:
            raise Bounced("mailbox full")
        return "sent"

    harness.start()
    job_id = pq.add_job(queue="emails", data={}).job_id
    assert job_id
    wait_until(lambda: finished_row(db, schema, job_id), what="the job to finish")
    wait_until(lambda: len(finished(spans, "process emails")) == 2, what="two process spans")
    failed, succeeded = sorted(finished(spans, "process emails"),
                               key=lambda span: span.attributes["portqueue.job.attempt"])
    for span in (failed, succeeded):
        assert span.kind is SpanKind.CONSUMER
        assert span.attributes["messaging.operation.name"] == "process"
        assert span.attributes["messaging.operation.type"] == "process"
        assert span.attributes["messaging.destination.name"] == "emails"
        assert span.attributes[MESSAGE_ID] == job_id
        assert BATCH not in span.attributes
        # The worker's own DSN names the server on the run span.
        server = server_of(pq._settings.dsn)
        assert {key: span.attributes.get(key) for key in server} == server
    assert failed.attributes["error.type"] == f"{__name__}.Bounced"
    assert failed.status.status_code is StatusCode.ERROR
    assert [event.name for event in failed.events] == ["exception"]
    assert "error.type" not in succeeded.attributes
    assert succeeded.status.status_code is StatusCode.UNSET and not succeeded.events


async def test_the_async_client_and_worker_follow_the_same_names(
    aharness: AsyncHarness, spans: Any, db: Db, schema: str, pg_dsn: str
) -> None:
    apq: AsyncPortQueue = aharness.apq

    @apq.handler("emails-async")
    async def handler(job: Any) -> None:
        raise ValueError("bad address")

    await aharness.start()
    job_id = (await apq.add_job(queue="emails-async", data={})).job_id
    await apq.add_jobs(queue="emails-async", jobs=[{"data": 1}, {"data": 2}])
    await wait_until_async(lambda: finished_row(db, schema, job_id), what="the job to fail")
    await wait_until_async(lambda: len(finished(spans, "process emails-async")) == 3,
                           what="three process spans")
    single, batch = finished(spans, "send emails-async")
    assert single.attributes[MESSAGE_ID] == job_id and BATCH not in single.attributes
    assert batch.attributes[BATCH] == 2
    for send in (single, batch):
        assert {key: send.attributes[key] for key in server_of(pg_dsn)} == server_of(pg_dsn)
    for run in finished(spans, "process emails-async"):
        assert run.attributes["error.type"] == "ValueError"  # a built-in: unqualified


def test_a_run_span_names_the_server_of_the_dsn_it_is_given(spans: Any) -> None:
    """The worker's DSN reaches the span through ``hooks.running(…, dsn)``."""
    with tracing.run_span("emails", "id", 1, None, "postgresql://app@db.internal:6432/app"):
        pass
    (run,) = spans.get_finished_spans()
    assert run.attributes["server.address"] == "db.internal"
    assert run.attributes["server.port"] == 6432


@pytest.mark.parametrize(("dsn", "expected"), [
    ("postgresql://app:secret@db.example.com:6543/app", ("db.example.com", 6543)),
    ("postgresql://app@db.example.com/app", ("db.example.com", 5432)),
    ("host=10.1.2.80 port=5433 dbname=app", ("10.1.2.80", 5433)),
    ("postgresql://app@[::1]:5434/app", ("::1", 5434)),
    ("host=/var/run/postgresql dbname=app", ("/var/run/postgresql", 5432)),
    ("hostaddr=10.1.2.81 dbname=app", ("10.1.2.81", 5432)),
    ("host=db.example.com hostaddr=10.1.2.81 dbname=app", ("db.example.com", 5432)),
    ("postgresql://app@db1:5432,db2:5432/app", None),  # which one answers is not known
    ("host=db1,db2 dbname=app", None),
])
def test_server_attributes_come_from_the_dsn(
    dsn: str, expected: tuple[str, int] | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PGHOST", raising=False)
    monkeypatch.delenv("PGPORT", raising=False)
    tracing.server_attributes.cache_clear()
    attributes = tracing.server_attributes(dsn)
    if expected is None:
        assert attributes == {}
    else:
        assert attributes == {"server.address": expected[0], "server.port": expected[1]}


def test_a_dsn_without_a_host_takes_pghost_and_pgport(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGHOST", "db.from-env")
    monkeypatch.setenv("PGPORT", "7000")
    tracing.server_attributes.cache_clear()
    assert tracing.server_attributes("dbname=app") == {
        "server.address": "db.from-env", "server.port": 7000}
    monkeypatch.delenv("PGHOST")
    tracing.server_attributes.cache_clear()
    assert tracing.server_attributes("dbname=app") == {}  # the socket libpq defaults to
    tracing.server_attributes.cache_clear()


async def test_an_async_handler_cancelled_at_its_timeout_ends_a_failed_span(
    aharness: AsyncHarness, spans: Any, db: Db, schema: str
) -> None:
    apq = aharness.apq
    gate = aharness.gate()

    @apq.handler("slow-mail", timeout_seconds=1)
    async def handler(job: Any) -> None:
        await wait_gate(gate)  # never opened before the timeout

    await aharness.start()
    job_id = (await apq.add_job(queue="slow-mail", data={})).job_id
    await wait_until_async(lambda: finished_row(db, schema, job_id), what="the job to time out")
    await wait_until_async(lambda: finished(spans, "process slow-mail"), what="its span")
    (run,) = finished(spans, "process slow-mail")
    assert run.attributes["error.type"] == "asyncio.exceptions.CancelledError"
    assert run.status.status_code is StatusCode.ERROR
