# A sub-question keeps the digest of its normal form (issue 17): storing new ones read every
# row's text to spot duplicates, a cost that grew with the session. Existing rows get theirs
# here, from the same function the app uses (a copy could drift from it, and a digest that
# differs from the app's would let duplicates through).

from __future__ import annotations

from django.conf import settings
from django.db import migrations, models

from thinking.provider.parsing import question_digest

BATCH = 500


def _digests(apps, schema_editor):
    question_model = apps.get_model("thinking", "SubQuestion")
    # The keys first: no cursor stays open over the table while its rows are updated.
    keys = list(question_model.objects.order_by("pk").values_list("pk", flat=True))
    for start in range(0, len(keys), BATCH):
        batch = question_model.objects.filter(pk__in=keys[start : start + BATCH])
        rows = list(batch.only("pk", "text"))
        for row in rows:
            row.text_key = question_digest(row.text)
        question_model.objects.bulk_update(rows, ["text_key"], batch_size=BATCH)


class Migration(migrations.Migration):
    dependencies = [
        ("thinking", "0014_thought_session_cycle"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="subquestion",
            name="text_key",
            field=models.CharField(blank=True, default="", editable=False, max_length=32),
        ),
        migrations.RunPython(_digests, migrations.RunPython.noop),
        migrations.AddIndex(
            model_name="subquestion",
            index=models.Index(fields=["session", "text_key"], name="subquestion_text_key"),
        ),
    ]
