from django.db import models


class Order(models.Model):
    """The business row a view writes in the same transaction as it enqueues."""

    reference = models.CharField(max_length=40, unique=True)
    receipt_sent = models.BooleanField(default=False)

    class Meta:
        app_label = "shop"
