from __future__ import annotations

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("thinking", "0016_thought_session_type"),
    ]

    operations = [
        migrations.RemoveField(model_name="thinkingsession", name="log_edits"),
    ]
