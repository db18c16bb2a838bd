# Thoughts indexed by session and type (issue 17): every thought cycle reads the newest
# hints, and that read walked every thought of the session to find few or none.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("thinking", "0015_sub_question_text_key"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="thought",
            index=models.Index(fields=["session", "type", "sequence"], name="thought_session_type"),
        ),
    ]
