"""Team and Membership now live in `accounts` (same tables); only the state moves."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("research", "0003_teams"),
        ("accounts", "0001_accounts_move_teams_and_tokens"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="knowledgeitem",
                    name="team",
                    field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name="knowledge_items", to="accounts.team"),
                ),
                migrations.DeleteModel(name="Membership"),
                migrations.DeleteModel(name="Team"),
            ],
            database_operations=[],
        ),
    ]
