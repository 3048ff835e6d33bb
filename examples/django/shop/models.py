from django.db import models


class Order(models.Model):
    item = models.CharField(max_length=100)
    quantity = models.PositiveIntegerField()
    receipt_sent = models.BooleanField(default=False)
    # The id of the task that sends the receipt: TaskResult.id, venturi's job id.
    receipt_task = models.CharField(max_length=36, blank=True)


class Event(models.Model):
    """What the example's tasks did, in the order they did it."""

    label = models.CharField(max_length=100)
    attempt = models.PositiveIntegerField(default=1)
