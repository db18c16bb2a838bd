# Worker heartbeats (issue 68): /healthz reports the workers healthy while one has beaten
# within the lease.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("thinking", "0016_thought_session_type"),
    ]

    operations = [
        migrations.CreateModel(
            name="WorkerHeartbeat",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("worker_id", models.CharField(max_length=100, unique=True)),
                ("seen_at", models.DateTimeField(db_index=True)),
            ],
        ),
    ]
