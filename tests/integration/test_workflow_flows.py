"""SPEC §9: flows (a graph of jobs added atomically, read back with get_flow)
and fan-out by topic, end to end; refusals leave nothing written; a flow
added in a caller's transaction lives or dies with it (every adapter)."""

from __future__ import annotations

import threading
from typing import Any

import psycopg
import pytest

from portqueue import FlowResult, FlowSnapshot, FlowStatus, JobStatus, PortQueue, QueuePausedError
from tests.support.rows import count_jobs, count_rows, job_row
from tests.support.tx_adapters import CallerTransaction, count_orders
from tests.support.waiting import wait_until
from tests.support.workers import SyncHarness

Db = psycopg.Connection[Any]


def nothing_written(db: Db, schema: str) -> bool:
    return count_jobs(db, schema) == 0 and count_rows(db, schema, "queue") == 0


def finished_flow(pq: PortQueue, flow_id: str) -> FlowSnapshot | None:
    snapshot = pq.get_flow(flow_id=flow_id)
    return snapshot if snapshot is not None and snapshot.status is not FlowStatus.RUNNING else None


def test_a_diamond_runs_in_order_and_each_step_sees_its_parents_outputs(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    pq = harness.pq
    order: list[str] = []
    seen: dict[str, dict[str, Any]] = {}
    lock = threading.Lock()

    def step(job: Any) -> str:
        with lock:
            order.append(job.data["key"])
            seen[job.data["key"]] = job.parent_outputs
        return f"out-{job.data['key']}"

    for queue in ("extract", "transform", "report"):
        pq.handler(queue, concurrency=2)(step)
    flow = pq.add_flow(jobs=[
        {"key": "extract", "queue": "extract", "data": {"key": "extract"}},
        {"key": "t1", "queue": "transform", "data": {"key": "t1"}, "depends_on": ["extract"]},
        {"key": "t2", "queue": "transform", "data": {"key": "t2"}, "depends_on": ["extract"]},
        {"key": "report", "queue": "report", "data": {"key": "report"},
         "depends_on": ["t1", "t2"]},
    ])
    assert [r.status for r in flow.jobs.values()] == [
        JobStatus.PENDING, JobStatus.WAITING, JobStatus.WAITING, JobStatus.WAITING]
    assert pq.get_flow(flow_id=flow.flow_id).status is FlowStatus.RUNNING  # type: ignore[union-attr]
    harness.start()
    wait_until(lambda: len(order) == 4, what="the whole diamond")
    assert order[0] == "extract" and order[-1] == "report"
    assert sorted(order[1:3]) == ["t1", "t2"]
    assert seen["t1"] == {"extract": "out-extract"}
    assert seen["report"] == {"t1": "out-t1", "t2": "out-t2"}
    snapshot = wait_until(lambda: finished_flow(pq, flow.flow_id), what="the flow to complete")
    assert snapshot.status is FlowStatus.COMPLETED
    assert list(snapshot.jobs) == ["extract", "t1", "t2", "report"]
    report = snapshot.jobs["report"]
    assert report.flow_id == flow.flow_id
    assert sorted(report.depends_on) == sorted([flow.jobs["t1"].job_id, flow.jobs["t2"].job_id])


def test_a_failed_step_fails_the_flow_and_a_run_step_still_runs(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    pq = harness.pq
    ran: list[str] = []

    @pq.handler("steps")
    def steps(job: Any) -> None:
        ran.append(job.data)
        if job.data == "bad":
            raise RuntimeError("bad step")

    flow = pq.add_flow(jobs=[
        {"key": "bad", "queue": "steps", "data": "bad"},
        {"key": "next", "queue": "steps", "data": "next", "depends_on": ["bad"]},
        {"key": "after-next", "queue": "steps", "data": "after", "depends_on": ["next"]},
        {"key": "cleanup", "queue": "steps", "data": "cleanup", "depends_on": ["next"],
         "on_dependency_failure": "run"},
    ])
    harness.start()
    snapshot = wait_until(lambda: finished_flow(pq, flow.flow_id), what="the flow to finish")
    assert snapshot.status is FlowStatus.FAILED
    statuses = {key: job.status.value for key, job in snapshot.jobs.items()}
    assert statuses == {"bad": "failed", "next": "cancelled", "after-next": "cancelled",
                        "cleanup": "completed"}
    assert sorted(ran) == ["bad", "cleanup"]
    assert snapshot.jobs["next"].errors[-1]["type"] == "DependencyFailed"


@pytest.mark.parametrize(("jobs", "argument", "message"), [
    ([{"key": "a", "queue": "q", "data": 1, "depends_on": ["b"]},
      {"key": "b", "queue": "q", "data": 1, "depends_on": ["a"]}],
     "jobs[0].depends_on", "forms a cycle: 'a' -> 'b' -> 'a'"),
    ([{"key": "a", "queue": "q", "data": 1, "depends_on": ["a"]}],
     "jobs[0].depends_on", "forms a cycle"),
    ([{"key": "a", "queue": "q", "data": 1},
      {"key": "b", "queue": "q", "data": 1, "depends_on": ["nope"]}],
     "jobs[1].depends_on", "unknown key 'nope'"),
    ([{"key": "a", "queue": "q", "data": 1}, {"key": "a", "queue": "q", "data": 2}],
     "jobs[1].key", "is the key of jobs[0]"),
    ([{"queue": "q", "data": 1}], "jobs[0].key", "must be a string"),
    ([{"key": "a", "data": 1}], "jobs[0].queue", "must be a string"),
    ([{"key": "a", "queue": "q", "data": 1, "on_dependency_failure": "ignore"}],
     "jobs[0].on_dependency_failure", "must be one of"),
    ([{"key": "a", "queue": "q", "data": 1, "idempotency_key": "k"}],
     "jobs[0].idempotency_key", "is not taken"),
    ([{"key": "a", "queue": "q", "data": 1, "bogus": 1}], "jobs[0].bogus", "unknown option"),
    ([], "jobs", "at least one job"),
])
def test_a_bad_flow_is_refused_naming_the_entry_with_nothing_written(
    client: PortQueue, db: Db, schema: str, jobs: list[dict[str, Any]], argument: str,
    message: str,
) -> None:
    with pytest.raises(ValueError) as info:
        client.add_flow(jobs=jobs)
    assert str(info.value).startswith(f"{argument}: ")
    assert message in str(info.value)
    assert nothing_written(db, schema)


def test_a_flow_to_a_paused_queue_is_refused_whole(client: PortQueue, db: Db,
                                                    schema: str) -> None:
    client.pause_queue(queue="closed", mode="all")  # type: ignore[arg-type]
    with pytest.raises(QueuePausedError):
        client.add_flow(jobs=[{"key": "a", "queue": "open", "data": 1},
                              {"key": "b", "queue": "closed", "data": 1, "depends_on": ["a"]}])
    assert count_jobs(db, schema) == 0


def order_flow_in_transaction(caller: CallerTransaction) -> FlowResult:
    """An order written and its two-step flow added, in the caller's open transaction."""
    caller.begin()
    caller.write_order("order-1")
    flow: FlowResult = caller.client.add_flow(jobs=[
        {"key": "charge", "queue": "payments", "data": {"order": "order-1"}},
        {"key": "ship", "queue": "shipping", "data": {"order": "order-1"},
         "depends_on": ["charge"]},
    ], tx=caller.tx)
    return flow


def test_a_flow_in_a_rolled_back_transaction_leaves_nothing(
    caller: CallerTransaction, db: Db, schema: str
) -> None:
    flow = order_flow_in_transaction(caller)
    assert flow.jobs["ship"].status is JobStatus.WAITING
    caller.rollback()
    assert nothing_written(db, schema) and count_orders(db) == 0


def test_a_flow_in_a_committed_transaction_is_there_whole(
    caller: CallerTransaction, db: Db, schema: str
) -> None:
    flow = order_flow_in_transaction(caller)
    caller.commit()
    assert count_jobs(db, schema) == 2 and count_orders(db) == 1
    assert job_row(db, schema, flow.jobs["ship"].job_id)["flow_key"] == "ship"  # type: ignore[arg-type]


def test_get_flow_of_an_unknown_id_is_none(client: PortQueue) -> None:
    assert client.get_flow(flow_id="018f0000-0000-7000-8000-000000000000") is None
    with pytest.raises(ValueError, match=r"^flow_id: "):
        client.get_flow(flow_id="not-a-uuid")


# --- fan-out ---


def test_publish_with_no_subscribers_adds_nothing(client: PortQueue, db: Db,
                                                  schema: str) -> None:
    assert client.publish(topic="order.created", data={"order": 1}) == []
    assert count_jobs(db, schema) == 0


def test_publish_adds_one_job_per_subscribed_queue_with_the_options(
    harness: SyncHarness, db: Db, schema: str
) -> None:
    pq = harness.pq
    got: dict[str, Any] = {}

    for queue in ("emails", "analytics"):
        @pq.handler(queue)
        def handle(job: Any) -> None:
            got[job.queue] = job.data

    assert pq.subscribe(topic="order.created", queue="emails") is True
    assert pq.subscribe(topic="order.created", queue="emails") is False
    assert pq.subscribe(topic="order.created", queue="analytics") is True
    assert pq.subscribe(topic="other", queue="nobody-publishes") is True
    results = pq.publish(topic="order.created", data={"order": 7}, priority=5,
                         retry={"max_attempts": 3})
    assert [r.queue for r in results] == ["analytics", "emails"]
    assert {r.status for r in results} == {JobStatus.PENDING}
    for result in results:
        row = job_row(db, schema, result.job_id)  # type: ignore[arg-type]
        assert (row["priority"], row["max_attempts"]) == (5, 3)
    harness.start()
    wait_until(lambda: len(got) == 2, what="both subscribers to run")
    assert got == {"emails": {"order": 7}, "analytics": {"order": 7}}
    assert pq.unsubscribe(topic="order.created", queue="emails") is True
    assert pq.unsubscribe(topic="order.created", queue="emails") is False
    assert [r.queue for r in pq.publish(topic="order.created", data=1)] == ["analytics"]


def test_publish_in_a_rolled_back_transaction_leaves_nothing(
    caller: CallerTransaction, client: PortQueue, db: Db, schema: str
) -> None:
    client.subscribe(topic="t", queue="subscriber")
    caller.begin()
    (added,) = caller.client.publish(topic="t", data=1, tx=caller.tx)
    assert added.queue == "subscriber"
    caller.rollback()
    assert count_jobs(db, schema) == 0


def test_bad_publish_and_subscribe_input_is_refused(client: PortQueue, db: Db,
                                                    schema: str) -> None:
    with pytest.raises(ValueError, match=r"^topic: "):
        client.publish(topic="", data=1)
    with pytest.raises(ValueError, match=r"^queue: "):
        client.subscribe(topic="t", queue="")
    with pytest.raises(ValueError, match=r"^data: "):
        client.publish(topic="t", data=float("nan"))
    assert count_rows(db, schema, "subscription") == 0
