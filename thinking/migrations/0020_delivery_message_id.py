from __future__ import annotations

import uuid
from typing import Any

from django.db import migrations, models


def distinct_ids(apps: Any, schema_editor: Any) -> None:
    """AddField gives every existing row the same default: each delivery gets its own id."""
    Delivery = apps.get_model("thinking", "Delivery")
    for pk in Delivery.objects.values_list("pk", flat=True).iterator():
        Delivery.objects.filter(pk=pk).update(message_id=uuid.uuid4())


class Migration(migrations.Migration):
    dependencies = [
        ("thinking", "0019_costs_conclude_tools"),
    ]

    operations = [
        migrations.AddField(
            model_name="delivery",
            name="message_id",
            field=models.UUIDField(default=uuid.uuid4, editable=False),
        ),
        migrations.RunPython(distinct_ids, migrations.RunPython.noop, elidable=True),
    ]
