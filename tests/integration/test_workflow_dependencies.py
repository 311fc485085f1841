"""SPEC §9: jobs that depend on others, end to end (producer -> Postgres ->
worker -> handler -> row): waiting, release when every dependency completed,
failure propagation, on_dependency_failure="run", parent_outputs, cancel and
retry of a dependency, and refusals with nothing written."""

from __future__ import annotations

import threading
from datetime import datetime
from typing import Any

import psycopg
import pytest

from portqueue import JobStatus, PortQueue
from portqueue.maintenance.pruner import Pruner
from tests.support.rows import count_jobs, finish, job_row, update_job
from tests.support.services import run_once
from tests.support.waiting import wait_until
from tests.support.workers import SyncHarness, finished_row

Db = psycopg.Connection[Any]


def status(db: Db, schema: str, job_id: str | None) -> str:
    assert job_id is not None
    return str(job_row(db, schema, job_id)["status"])


def test_a_dependent_waits_then_runs_after_its_dependency_with_its_output(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    pq = harness.pq
    seen: list[dict[str, Any]] = []
    release = harness.gate()

    @pq.handler("extract")
    def extract(job: Any) -> Any:
        release.wait(20)
        return {"rows": 3}

    @pq.handler("load")
    def load(job: Any) -> Any:
        seen.append(job.parent_outputs)
        return "loaded"

    a = pq.add_job(queue="extract", data=1)
    b = pq.add_job(queue="load", data=2, depends_on=[a.job_id])  # type: ignore[list-item]
    assert b.status is JobStatus.WAITING
    snapshot = pq.get_job(job_id=b.job_id)  # type: ignore[arg-type]
    assert snapshot is not None and snapshot.depends_on == [a.job_id]
    harness.start()
    wait_until(lambda: status(db, schema, a.job_id) == "active", what="the dependency to run")
    assert status(db, schema, b.job_id) == "waiting"
    release.set()
    wait_until(lambda: finished_row(db, schema, b.job_id), what="the dependent to finish")  # type: ignore[arg-type]
    assert status(db, schema, b.job_id) == "completed"
    assert seen == [{a.job_id: {"rows": 3}}]
    assert pq.get_queue_stats(queue="load").counts[JobStatus.WAITING] == 0


def test_a_dependency_completed_at_add_time_counts_as_done(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    pq = harness.pq
    a = pq.add_job(queue="done", data=1)
    update_job(db, schema, a.job_id, "status = 'completed', finished_at = now(), output = '7'")  # type: ignore[arg-type]
    b = pq.add_job(queue="after", data=2, depends_on=[a.job_id])  # type: ignore[list-item]
    assert b.status is JobStatus.PENDING


def test_a_waiting_job_is_never_claimed_and_counts_as_waiting(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    pq = harness.pq
    ran: list[str] = []
    gate = harness.gate()

    @pq.handler("slow")
    def slow(job: Any) -> None:
        gate.wait(20)

    @pq.handler("child")
    def child(job: Any) -> None:
        ran.append(job.id)

    a = pq.add_job(queue="slow", data=1)
    children = pq.add_jobs(queue="child", jobs=[{"data": n, "depends_on": [a.job_id]}
                                                for n in range(5)])
    assert {c.status for c in children} == {JobStatus.WAITING}
    assert pq.get_queue_stats(queue="child").counts[JobStatus.WAITING] == 5
    harness.start()
    plain = pq.add_job(queue="child", data="plain")
    wait_until(lambda: plain.job_id in ran, what="the plain job to run")
    assert ran == [plain.job_id]
    gate.set()
    wait_until(lambda: len(ran) == 6, what="the dependents to run")


def test_a_failed_dependency_cancels_its_dependents_and_theirs(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    pq = harness.pq

    @pq.handler("parent")
    def parent(job: Any) -> None:
        raise RuntimeError("no")

    @pq.handler("kid")
    def kid(job: Any) -> None:
        raise AssertionError("must not run")

    a = pq.add_job(queue="parent", data=1)
    b = pq.add_job(queue="kid", data=2, depends_on=[a.job_id])  # type: ignore[list-item]
    c = pq.add_job(queue="kid", data=3, depends_on=[b.job_id])  # type: ignore[list-item]
    harness.start()
    wait_until(lambda: status(db, schema, c.job_id) == "cancelled", what="the grandchild")
    assert status(db, schema, a.job_id) == "failed"
    row = job_row(db, schema, b.job_id)  # type: ignore[arg-type]
    assert row["status"] == "cancelled"
    assert row["errors"][-1]["type"] == "DependencyFailed"
    assert row["errors"][-1]["dependency_id"] == a.job_id
    assert row["error"] == f"dependency {a.job_id} ended failed"
    assert job_row(db, schema, c.job_id)["errors"][-1]["dependency_id"] == b.job_id  # type: ignore[arg-type]


def test_on_dependency_failure_run_runs_once_every_dependency_finished(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    pq = harness.pq
    seen: list[dict[str, Any]] = []
    gate = harness.gate()

    @pq.handler("bad")
    def bad(job: Any) -> None:
        raise RuntimeError("no")

    @pq.handler("good")
    def good(job: Any) -> str:
        gate.wait(20)
        return "ok"

    @pq.handler("report")
    def report(job: Any) -> None:
        seen.append(job.parent_outputs)

    a = pq.add_job(queue="bad", data=1)
    b = pq.add_job(queue="good", data=2)
    r = pq.add_jobs(queue="report", jobs=[{"data": 3, "depends_on": [a.job_id, b.job_id],
                                           "on_dependency_failure": "run"}])[0]
    harness.start()
    wait_until(lambda: status(db, schema, a.job_id) == "failed", what="the failure")
    assert status(db, schema, r.job_id) == "waiting"
    gate.set()
    wait_until(lambda: status(db, schema, r.job_id) == "completed", what="the report")
    assert seen == [{a.job_id: None, b.job_id: "ok"}]


def test_cancelling_a_waiting_job_cancels_its_dependents(
    client: PortQueue, db: Db, schema: str
) -> None:
    a = client.add_job(queue="p", data=1)
    b = client.add_job(queue="c", data=2, depends_on=[a.job_id])  # type: ignore[list-item]
    c = client.add_job(queue="c", data=3, depends_on=[b.job_id])  # type: ignore[list-item]
    assert client.cancel_job(job_id=b.job_id).outcome.value == "cancelled"  # type: ignore[arg-type]
    assert status(db, schema, c.job_id) == "cancelled"
    assert status(db, schema, a.job_id) == "pending"


def test_retrying_a_failed_dependency_rearms_the_dependents_it_cancelled(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    pq = harness.pq
    fail = threading.Event()
    fail.set()

    @pq.handler("flaky")
    def flaky(job: Any) -> str:
        if fail.is_set():
            raise RuntimeError("first time")
        return "second time"

    @pq.handler("after")
    def after(job: Any) -> Any:
        return job.parent_outputs

    a = pq.add_job(queue="flaky", data=1)
    b = pq.add_job(queue="after", data=2, depends_on=[a.job_id])  # type: ignore[list-item]
    c = pq.add_job(queue="after", data=3, depends_on=[b.job_id])  # type: ignore[list-item]
    harness.start()
    wait_until(lambda: status(db, schema, c.job_id) == "cancelled", what="propagation")
    fail.clear()
    pq.retry_job(job_id=a.job_id)  # type: ignore[arg-type]
    assert status(db, schema, b.job_id) in {"waiting", "pending", "active", "completed"}
    wait_until(lambda: status(db, schema, c.job_id) == "completed", what="the re-armed chain")
    assert job_row(db, schema, c.job_id)["output"] == {b.job_id: {a.job_id: "second time"}}  # type: ignore[arg-type]


def test_removing_a_dependency_cancels_its_waiting_dependents(
    client: PortQueue, db: Db, schema: str
) -> None:
    a = client.add_job(queue="p", data=1)
    b = client.add_job(queue="c", data=2, depends_on=[a.job_id])  # type: ignore[list-item]
    assert client.remove_job(job_id=a.job_id)  # type: ignore[arg-type]
    row = job_row(db, schema, b.job_id)  # type: ignore[arg-type]
    assert row["status"] == "cancelled"
    assert row["error"] == f"dependency {a.job_id} ended removed"


def test_an_unknown_dependency_is_refused_with_nothing_written(
    client: PortQueue, db: Db, schema: str
) -> None:
    a = client.add_job(queue="p", data=1)
    missing = "018f0000-0000-7000-8000-000000000000"
    with pytest.raises(ValueError, match=r"jobs\[1\]\.depends_on: no job " + missing):
        client.add_jobs(queue="c", jobs=[{"data": 1, "depends_on": [a.job_id]},
                                         {"data": 2, "depends_on": [missing]}])
    with pytest.raises(ValueError, match="depends_on"):
        client.add_job(queue="c", data=1, depends_on=[missing])
    assert count_jobs(db, schema) == 1
    assert job_row(db, schema, a.job_id)["has_dependents"] is False  # type: ignore[arg-type]


def test_a_dependency_already_failed_cancels_the_job_at_add(
    client: PortQueue, db: Db, schema: str
) -> None:
    a = client.add_job(queue="p", data=1)
    client.cancel_job(job_id=a.job_id)  # type: ignore[arg-type]
    b = client.add_job(queue="c", data=2, depends_on=[a.job_id])  # type: ignore[list-item]
    assert b.status is JobStatus.CANCELLED
    assert job_row(db, schema, b.job_id)["errors"][0]["type"] == "DependencyFailed"  # type: ignore[arg-type]


def test_the_pruner_keeps_a_dependency_whose_dependents_wait(
    client: PortQueue, db: Db, schema: str, pg_dsn: str
) -> None:
    a = client.add_job(queue="p", data=1, retention={"ttl_seconds": 0})
    other = client.add_job(queue="p", data=1, retention={"ttl_seconds": 0})
    b = client.add_job(queue="c", data=2, depends_on=[a.job_id, other.job_id])  # type: ignore[list-item]
    finish(db, schema, a.job_id, "completed")  # type: ignore[arg-type]
    assert status(db, schema, b.job_id) == "waiting"
    run_once(Pruner, pg_dsn, schema)
    assert count_jobs(db, schema, f"id = '{a.job_id}'") == 1
    finish(db, schema, other.job_id, "completed")  # type: ignore[arg-type]
    assert status(db, schema, b.job_id) == "pending"
    run_once(Pruner, pg_dsn, schema)
    assert count_jobs(db, schema, f"id = '{a.job_id}'") == 0


def test_bulk_cancel_takes_waiting_jobs_and_their_dependents(client: PortQueue) -> None:
    parent = client.add_job(queue="bulk-wf", data=1).job_id
    child = client.add_job(queue="bulk-wf", data=2, depends_on=[parent]).job_id
    grandchild = client.add_job(queue="bulk-wf", data=3, depends_on=[child]).job_id

    counts = client.cancel_jobs(queue="bulk-wf", statuses=[JobStatus.WAITING])

    assert counts.cancelled >= 1
    for job_id in (child, grandchild):
        snapshot = client.get_job(job_id=job_id)
        assert snapshot is not None and snapshot.status == "cancelled"
    assert client.retry_jobs(job_ids=[parent]) == 0, "a pending job is not re-armed"


@pytest.mark.parametrize(("option", "value", "argument"), [
    ("throttle", {"key": "k", "seconds": 5}, "throttle"),
    ("debounce", {"key": "k", "seconds": 5}, "debounce"),
    ("schedule", {"start_at": "2030-01-01T00:00:00+00:00"}, "schedule"),
])
def test_a_dependent_add_refuses_options_a_graph_cannot_take(
    client: PortQueue, db: Db, schema: str, option: str, value: Any, argument: str
) -> None:
    parent = client.add_job(queue="refused-wf", data=1).job_id
    if option == "schedule":
        value = {"start_at": datetime.fromisoformat(value["start_at"])}
    before = count_jobs(db, schema)
    with pytest.raises(ValueError, match=argument):
        client.add_job(queue="refused-wf", data=2, depends_on=[parent], **{option: value})
    assert count_jobs(db, schema) == before, "nothing written"
