"""OpenTelemetry: an add opens a PRODUCER span whose W3C trace context rides
on the job row (attrs["traceparent"]); the worker runs the handler inside a
CONSUMER span whose parent is that add span, with the run span current for
the handler's own spans. Without opentelemetry nothing is stored or opened."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import psycopg
import pytest
from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode
from typer.testing import CliRunner

from portqueue import PortQueue
from portqueue.cli import app
from portqueue.metrics import TRACEPARENT, tracing
from tests.support.rows import fetch_one
from tests.support.spans import only, traceparent_of
from tests.support.waiting import wait_until, wait_until_async
from tests.support.workers import AsyncHarness, SyncHarness, finished_row

Db = psycopg.Connection[Any]


def test_the_run_span_is_a_child_of_the_add_span_across_a_worker(
    harness: SyncHarness, spans: Any, db: Db, schema: str
) -> None:
    pq = harness.pq
    seen: dict[str, Any] = {}

    @pq.handler("traced")
    def handler(job: Any) -> str:
        # The run span is current inside the handler: its spans are children.
        seen["current"] = trace.get_current_span().get_span_context()
        return "ok"

    harness.start()
    app_tracer = tracing._provider.get_tracer("the-app")
    with app_tracer.start_as_current_span("POST /orders") as request:
        job_id = pq.add_job(queue="traced", data={"order": 1}).job_id
    assert job_id
    wait_until(lambda: finished_row(db, schema, job_id), what="the job to finish")
    wait_until(lambda: len(spans.get_finished_spans()) == 3, what="three spans")

    add = only(spans, "send traced")
    run = only(spans, "process traced")
    assert add.kind is SpanKind.PRODUCER and run.kind is SpanKind.CONSUMER
    assert add.parent.span_id == request.get_span_context().span_id
    assert run.parent is not None and run.parent.span_id == add.context.span_id
    assert run.context.trace_id == add.context.trace_id == request.get_span_context().trace_id
    assert seen["current"].span_id == run.context.span_id
    assert add.attributes["messaging.message.id"] == job_id
    assert add.attributes["messaging.destination.name"] == "traced"
    assert run.attributes["messaging.message.id"] == job_id
    assert run.attributes["portqueue.job.attempt"] == 1
    assert run.status.status_code is StatusCode.UNSET
    row = fetch_one(db, schema, "job", "id = %s", [job_id])
    assert row is not None and row["attrs"] == {TRACEPARENT: traceparent_of(add)}
    assert row["status"] == "completed"


def test_a_raising_handler_marks_its_run_span_as_an_error(
    harness: SyncHarness, spans: Any, db: Db, schema: str
) -> None:
    pq = harness.pq

    @pq.handler("traced", retry={"max_attempts": 2})
    def handler(job: Any) -> None:
        raise RuntimeError(f"attempt {job.attempt} broke")

    harness.start()
    job_id = pq.add_job(queue="traced", data={}).job_id
    assert job_id
    wait_until(lambda: finished_row(db, schema, job_id), what="the job to fail")
    wait_until(lambda: len(spans.get_finished_spans()) == 3, what="one add, two runs")
    add = only(spans, "send traced")
    runs = [s for s in spans.get_finished_spans() if s.name == "process traced"]
    # Both attempts continue the add's trace: the context stays on the row.
    assert sorted(r.attributes["portqueue.job.attempt"] for r in runs) == [1, 2]
    for run in runs:
        assert run.parent.span_id == add.context.span_id
        assert run.status.status_code is StatusCode.ERROR
        assert run.attributes["error.type"] == "RuntimeError"
        (event,) = run.events
        assert event.name == "exception"
        assert event.attributes["exception.type"] == "RuntimeError"


async def test_an_async_handler_runs_inside_its_run_span(
    aharness: AsyncHarness, spans: Any, db: Db, schema: str
) -> None:
    apq = aharness.apq
    seen: dict[str, Any] = {}

    @apq.handler("traced-async")
    async def handler(job: Any) -> None:
        seen["current"] = trace.get_current_span().get_span_context()

    await aharness.start()
    job_id = (await apq.add_job(queue="traced-async", data=1)).job_id
    assert job_id
    await wait_until_async(lambda: finished_row(db, schema, job_id), what="the job to finish")
    await wait_until_async(lambda: len(spans.get_finished_spans()) == 2, what="two spans")
    add = only(spans, "send traced-async")
    run = only(spans, "process traced-async")
    assert run.parent.span_id == add.context.span_id
    assert seen["current"].span_id == run.context.span_id


def test_a_batch_shares_one_add_span_and_schedules_carry_no_context(
    pq: PortQueue, spans: Any, db: Db, schema: str
) -> None:
    results = pq.add_jobs(queue="batch", jobs=[{"data": n} for n in range(3)])
    pq.add_job(queue="batch", data={}, idempotency_key="k")
    pq.add_job(queue="batch", data={}, idempotency_key="k")
    recurring = pq.add_job(queue="batch", data={}, schedule={"start_every_seconds": 60})
    adds = [s for s in spans.get_finished_spans() if s.name == "send batch"]
    assert len(adds) == 4
    batch = adds[0]
    assert batch.attributes["messaging.batch.message_count"] == 3
    for result in results:
        row = fetch_one(db, schema, "job", "id = %s", [result.job_id])
        assert row is not None and row["attrs"] == {TRACEPARENT: traceparent_of(batch)}
    assert adds[1].attributes["portqueue.deduplicated"] is False
    assert adds[2].attributes["portqueue.deduplicated"] is True
    assert adds[2].attributes["messaging.message.id"] == adds[1].attributes["messaging.message.id"]
    schedule = fetch_one(db, schema, "schedule", "id = %s", [recurring.schedule_id])
    assert schedule is not None and "attrs" not in schedule["job_options"]


def test_no_context_is_stored_without_a_recording_tracer(
    pq: PortQueue, db: Db, schema: str
) -> None:
    """OpenTelemetry's API without a configured TracerProvider: no span, nothing stored."""
    assert not tracing.recording()
    job_id = pq.add_job(queue="untraced", data={}).job_id
    row = fetch_one(db, schema, "job", "id = %s", [job_id])
    assert row is not None and row["attrs"] == {}


def test_without_opentelemetry_installed_jobs_add_and_run_untraced(
    pg_dsn: str, schema: str, db: Db
) -> None:
    script = textwrap.dedent(f"""
        import sys
        sys.modules["opentelemetry"] = None  # as if the extra were not installed
        from portqueue import PortQueue
        from portqueue.metrics import hooks, tracing
        assert tracing.TRACING is False
        with PortQueue({pg_dsn!r}, schema={schema!r}) as pq:
            pq.create_queue(queue="plain", handler=lambda job: job.data)
            pq.start(maintenance=False, scheduler=False)
            try:
                assert pq.add_job_and_wait(queue="plain", data=7, timeout_seconds=10) == 7
            finally:
                pq.stop()
        assert "opentelemetry.trace" not in sys.modules
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert db.execute(
        f"SELECT count(*) FROM {schema}.job WHERE queue = 'plain' "  # noqa: S608
        "AND attrs = '{}' AND status = 'completed'").fetchone() == (1,)


@pytest.mark.parametrize("traceparent", [None, "", "garbage", "00-" + "0" * 32 + "-" + "0" * 16])
def test_a_missing_or_malformed_context_starts_a_new_trace(traceparent: str | None,
                                                          spans: Any) -> None:
    with tracing.run_span("q", "id", 1, traceparent):
        pass
    (run,) = spans.get_finished_spans()
    assert run.parent is None and run.context.is_valid


def test_portqueue_add_on_the_command_line_opens_the_producer_span(
    pg_dsn: str, schema: str, spans: Any, db: Db
) -> None:
    result = CliRunner().invoke(
        app, ["add", "from-cli", '{"n": 1}', "--create-queue", "--dsn", pg_dsn,
              "--schema", schema])
    assert result.exit_code == 0, result.output
    add = only(spans, "send from-cli")
    assert add.kind is SpanKind.PRODUCER
    job_id = add.attributes["messaging.message.id"]
    row = fetch_one(db, schema, "job", "id = %s", [job_id])
    assert row is not None and row["attrs"] == {TRACEPARENT: traceparent_of(add)}
