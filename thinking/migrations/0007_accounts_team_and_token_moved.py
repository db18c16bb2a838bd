"""ApiToken now lives in `accounts` (same table), and sessions point at accounts.Team (the
same `research_team` table); only the state moves."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("thinking", "0006_session_team"),
        ("accounts", "0001_accounts_move_teams_and_tokens"),
    ]
    # Before research forgets its Team, nothing may still point at it.
    run_before = [("research", "0004_accounts_team_moved")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="thinkingsession",
                    name="team",
                    field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name="thinking_sessions", to="accounts.team"),
                ),
                migrations.DeleteModel(name="ApiToken"),
            ],
            database_operations=[],
        ),
    ]
