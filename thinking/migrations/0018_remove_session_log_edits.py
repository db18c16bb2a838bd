from __future__ import annotations

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("thinking", "0017_worker_heartbeat"),
    ]

    operations = [
        migrations.RemoveField(model_name="thinkingsession", name="log_edits"),
    ]
