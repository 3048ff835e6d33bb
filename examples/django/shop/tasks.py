"""The shop's Django tasks: plain functions under @task, run by a venturi worker."""

import time

from django.db import transaction
from django.tasks import TaskContext, task

from .models import Event, Order


# --8<-- [start:send_receipt]
@task(queue_name="emails")
def send_receipt(order_id: int) -> dict[str, object]:
    with transaction.atomic():
        order = Order.objects.select_for_update().get(pk=order_id)
        order.receipt_sent = True
        order.save(update_fields=["receipt_sent"])
    return {"order": order.pk, "item": order.item, "quantity": order.quantity}
# --8<-- [end:send_receipt]


@task
def record(label: str) -> str:
    """Note that it ran (the tests read the order tasks ran in)."""
    Event.objects.create(label=label)
    return label


@task
def out_of_stock(item: str) -> None:
    raise LookupError(f"no {item} left")  # the message stays in the worker's log


# --8<-- [start:flaky]
@task(takes_context=True, max_failures=3)
def flaky(context: TaskContext, label: str) -> int:
    """Fails on its first attempt, succeeds on the next: three runs may fail."""
    Event.objects.create(label=label, attempt=context.attempt)
    if context.attempt < 2:
        raise ConnectionError("the payment provider timed out")
    return context.attempt
# --8<-- [end:flaky]


@task
async def ping(word: str) -> str:
    await Event.objects.acreate(label=f"ping:{word}")
    return word.upper()


@task
def hold(label: str) -> str:
    """Run until an Event named "release:<label>" exists (at most a minute)."""
    deadline = time.monotonic() + 60
    while not Event.objects.filter(label=f"release:{label}").exists():
        if time.monotonic() > deadline:
            raise TimeoutError("never released")
        time.sleep(0.05)
    return label
