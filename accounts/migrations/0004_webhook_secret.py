from __future__ import annotations

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0003_followup_notification_preference"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="WebhookSecret",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False,
                                           verbose_name="ID")),  # fmt: skip
                ("secret", models.CharField(max_length=100)),
                ("previous", models.CharField(blank=True, max_length=100)),
                ("created_at", models.DateTimeField(
                    help_text="When this key was made (its last rotation).")),  # fmt: skip
                ("user", models.OneToOneField(
                    on_delete=django.db.models.deletion.CASCADE, related_name="webhook_secret",
                    to=settings.AUTH_USER_MODEL)),  # fmt: skip
            ],
        ),
    ]
