"""The test project's task functions."""

from __future__ import annotations

from typing import Any

from django.tasks import TaskContext, task

from tests.django.shop.models import Order


class PaymentDeclined(Exception):
    """An error of the app's own, to see its class path in TaskResult.errors."""


@task
def add(a: int, b: int) -> int:
    return a + b


@task
def send_receipt(order_id: int) -> dict[str, Any]:
    """Writes through the ORM from the worker's thread."""
    updated = Order.objects.filter(pk=order_id).update(receipt_sent=True)
    return {"order_id": order_id, "updated": updated}


@task
def charge(reference: str) -> None:
    raise PaymentDeclined(f"card declined for {reference}")


@task(queue_name="emails", priority=10)
def send_email(to: str) -> str:
    return f"sent to {to}"


@task(takes_context=True)
def describe_attempt(context: TaskContext, label: str) -> dict[str, Any]:
    return {"label": label, "attempt": context.attempt, "id": context.task_result.id}


@task(takes_context=True, backend="retrying")
def flaky(context: TaskContext) -> str:
    if context.attempt == 1:
        raise ConnectionError("first attempt always fails")
    return f"succeeded on attempt {context.attempt}"


@task
async def double(value: int) -> int:
    return value * 2
