"""SPEC §10, task objects: add checks and encodes the arguments, configure sets
add options, a plain call runs the function, the job parameter, the default
queue name, and the round trip of typed parameters through a real worker
(drain) on both clients."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest

from portqueue import AsyncPortQueue, InvalidArgument, Job, PortQueue
from portqueue.tx import from_psycopg
from tests.support.rows import count_jobs, job_row

Db = psycopg.Connection[Any]


@dataclasses.dataclass(frozen=True)
class Address:
    street: str
    since: date


@dataclasses.dataclass(frozen=True)
class Order:
    id: UUID
    total: Decimal
    placed_at: datetime
    ship_to: Address
    notes: list[str] = dataclasses.field(default_factory=list)


def test_add_stores_the_arguments_by_name_with_defaults(pq: PortQueue, db: Db,
                                                        schema: str) -> None:
    @pq.task(queue="emails")
    def send_email(to: str, template: str = "welcome") -> None: ...

    added = send_email.add(to="a@b.com")
    assert added.queue == "emails"
    assert job_row(db, schema, added.job_id)["data"] == {"to": "a@b.com",
                                                        "template": "welcome"}
    positional = send_email.add("c@d.com", "reset")
    assert job_row(db, schema, positional.job_id)["data"] == {"to": "c@d.com",
                                                             "template": "reset"}


def test_the_queue_defaults_to_the_functions_module_and_name(pq: PortQueue) -> None:
    @pq.task()
    def resize(image_id: int) -> None: ...

    expected = (f"{__name__}.test_the_queue_defaults_to_the_functions_module_and_name"
                ".<locals>.resize")
    assert resize.queue == expected
    assert resize.add(image_id=1).queue == expected
    assert expected in pq._registry.queues()


@pytest.mark.parametrize(("call", "argument"), [
    (lambda t: t.add(), "to"),
    (lambda t: t.add(to="a", subject="b"), "subject"),
    (lambda t: t.add("a", "b", None, "d"), "args"),
    (lambda t: t.add("a", to="b"), "to"),
    (lambda t: t.add(to="a", sent_on="2026-01-01"), "sent_on"),
])
def test_a_missing_unknown_or_ill_typed_argument_is_refused_by_name(
        pq: PortQueue, db: Db, schema: str, call: Any, argument: str) -> None:
    @pq.task(queue="emails")
    def send_email(to: str, template: str = "welcome", sent_on: date | None = None) -> None: ...

    with pytest.raises(InvalidArgument) as refused:
        call(send_email)
    assert refused.value.argument == argument
    assert count_jobs(db, schema) == 0


def test_configure_applies_add_options_and_joins_a_transaction(
        pq: PortQueue, db: Db, schema: str, pg_dsn: str) -> None:
    @pq.task(queue="emails")
    def send_email(to: str) -> None: ...

    urgent = send_email.configure(priority=10, group_id="g1")
    added = urgent.configure(schedule={"start_after_seconds": 60}).add(to="x")
    row = job_row(db, schema, added.job_id)
    assert (row["priority"], row["group_id"]) == (10, "g1")
    assert row["start_after"] >= row["created_at"] + timedelta(seconds=60)
    assert send_email.add(to="y").job_id is not None  # configure made a new task
    with psycopg.connect(pg_dsn) as conn:
        inside = send_email.configure(tx=from_psycopg(conn)).add(to="tx")
        conn.rollback()
    assert count_jobs(db, schema, f"id = '{inside.job_id}'") == 0
    with pytest.raises(InvalidArgument) as refused:
        send_email.configure(priorty=1)
    assert refused.value.argument == "priorty"
    with pytest.raises(InvalidArgument):
        send_email.configure(priority="high").add(to="z")
    assert count_jobs(db, schema) == 2


def test_a_plain_call_runs_the_function_here(pq: PortQueue, db: Db, schema: str) -> None:
    @pq.task(queue="math")
    def add(a: int, b: int = 1) -> int:
        return a + b

    @pq.task(queue="with-job")
    def contextual(job: Job | None, n: int) -> Any:
        return (job, n)

    assert add(2, b=3) == 5
    assert contextual(n=4) == (None, 4)
    assert count_jobs(db, schema) == 0


def test_bad_declarations_are_refused(pq: PortQueue) -> None:
    with pytest.raises(InvalidArgument) as refused:
        pq.task(queue="q", concurrancy=2)
    assert refused.value.argument == "concurrancy"
    with pytest.raises(InvalidArgument) as refused:
        pq.task(queue="q")(lambda a, /: None)
    assert refused.value.argument == "function"
    with pytest.raises(InvalidArgument) as refused:
        pq.task(queue="")(lambda: None)
    assert refused.value.argument == "queue"


def test_typed_parameters_round_trip_through_a_worker(pq: PortQueue, db: Db,
                                                      schema: str) -> None:
    received: list[Any] = []

    @pq.task(queue="orders")
    def ship(job: Job, order: Order, on: date, tag: UUID | None = None,
             amounts: dict[str, Decimal] | None = None) -> Order:
        received.append((job.queue, job.attempt, order, on, tag, amounts))
        return order

    order = Order(id=uuid4(), total=Decimal("10.05"),
                  placed_at=datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=timezone.utc),
                  ship_to=Address("1 Main St", date(2020, 5, 6)), notes=["fragile"])
    tag = uuid4()
    added = ship.add(order=order, on=date(2026, 2, 3), tag=tag,
                     amounts={"tax": Decimal("0.10")})
    data = job_row(db, schema, added.job_id)["data"]
    assert data["order"]["total"] == "10.05" and data["on"] == "2026-02-03"
    assert pq.drain().completed == 1
    assert received == [("orders", 1, order, date(2026, 2, 3), tag, {"tax": Decimal("0.10")})]
    output = job_row(db, schema, added.job_id)["output"]
    assert output["id"] == str(order.id) and output["ship_to"]["since"] == "2020-05-06"


def test_a_job_whose_data_does_not_fit_the_signature_fails_like_any_handler(
        pq: PortQueue, db: Db, schema: str) -> None:
    @pq.task(queue="strict")
    def strict(n: int) -> None: ...

    # Added around the task (a producer elsewhere): its data names no parameter n.
    job_id = pq.add_job(queue="strict", data={"m": 1}).job_id
    assert pq.drain().failed == 1
    row = job_row(db, schema, job_id)
    assert row["status"] == "failed" and row["errors"][0]["type"] == "TypeError"


def test_the_async_client_awaits_add_and_runs_async_functions(
        apq_factory: Any, db: Db, schema: str) -> None:
    async def scenario() -> list[Any]:
        seen: list[Any] = []
        async with apq_factory() as apq:
            assert isinstance(apq, AsyncPortQueue)

            @apq.task(queue="async-orders", retry={"max_attempts": 2})
            async def ship(job: Any, placed_at: datetime, total: Decimal = Decimal(1)) -> str:
                await asyncio.sleep(0)
                seen.append((type(job).__name__, placed_at, total))
                return "ok"

            @apq.task(queue="async-sync-fn")
            def plain(n: int) -> int:
                seen.append(n)
                return n

            when = datetime(2026, 3, 4, tzinfo=timezone.utc)
            added = await ship.configure(priority=3).add(placed_at=when)
            await plain.add(n=7)
            with pytest.raises(InvalidArgument):
                await ship.add(placed=when)
            result = await apq.drain()
            assert (result.completed, result.failed) == (2, 0)
            row = job_row(db, schema, added.job_id)
            assert (row["priority"], row["max_attempts"], row["output"]) == (3, 2, "ok")
            assert plain(5) == 5
        return seen

    seen = asyncio.run(scenario())
    assert ("AsyncJob", datetime(2026, 3, 4, tzinfo=timezone.utc), Decimal(1)) in seen
    assert 7 in seen
