# The stage history moves off the session row into rows of its own (issue 17): each stage
# entered rewrote the whole JSON list, up to 300 entries, and every step read it back under
# its lock. Existing histories move as they are, oldest first.

import django.db.models.deletion
from django.db import migrations, models

BATCH = 500


def _rows_from_lists(apps, schema_editor):
    session_model = apps.get_model("thinking", "ThinkingSession")
    stage_model = apps.get_model("thinking", "Stage")
    # The keys first: no cursor stays open over the table while its rows are updated.
    for pk in list(session_model.objects.values_list("pk", flat=True)):
        stored = session_model.objects.filter(pk=pk).values_list("stages", flat=True).first()
        history = [item for item in stored or [] if isinstance(item, dict)]
        if not history:
            continue
        stage_model.objects.bulk_create(
            [
                stage_model(session_id=pk, sequence=number, entry=item)
                for number, item in enumerate(history, start=1)
            ],
            batch_size=BATCH,
        )
        # What was kept (at most 300): entries dropped before are not known any more.
        session_model.objects.filter(pk=pk).update(stage_count=len(history))


def _lists_from_rows(apps, schema_editor):
    session_model = apps.get_model("thinking", "ThinkingSession")
    stage_model = apps.get_model("thinking", "Stage")
    for pk in list(session_model.objects.filter(stage_count__gt=0).values_list("pk", flat=True)):
        rows = stage_model.objects.filter(session_id=pk).order_by("-sequence")[:300]
        history = [row.entry for row in rows][::-1]
        session_model.objects.filter(pk=pk).update(stages=history)


class Migration(migrations.Migration):

    dependencies = [
        ('thinking', '0011_followup_extend_followups_notify'),
    ]

    operations = [
        migrations.AddField(
            model_name='thinkingsession',
            name='stage_count',
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.CreateModel(
            name='Stage',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('sequence', models.PositiveIntegerField()),
                ('entry', models.JSONField()),
                ('session', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='stage_entries', to='thinking.thinkingsession')),
            ],
            options={
                'ordering': ['session', 'sequence'],
                'constraints': [models.UniqueConstraint(fields=('session', 'sequence'), name='stage_seq_unique')],
            },
        ),
        migrations.RunPython(_rows_from_lists, _lists_from_rows),
        migrations.RemoveField(
            model_name='thinkingsession',
            name='stages',
        ),
    ]
