"""Teams, memberships and API tokens move here from `research` and `thinking`.

The tables stay where they are (`research_team`, `research_membership`, `thinking_apitoken`):
this migration only takes the models into this app's state, so no row is copied or lost.
Then it adds invitations (existing members count as having accepted) and drops the
site-wide unique team name (it told anyone which names existed).
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

MOVED = [("research", "team"), ("research", "membership"), ("thinking", "apitoken")]


def accept_existing_members(apps, schema_editor):
    Membership = apps.get_model("accounts", "Membership")
    Membership.objects.filter(accepted_at__isnull=True).update(accepted_at=models.F("created_at"))


def move_content_types(apps, schema_editor):
    # Permissions and admin history point at content types: keep them, under the new app.
    ContentType = apps.get_model("contenttypes", "ContentType")
    db = schema_editor.connection.alias
    for old_app, model in MOVED:
        if not ContentType.objects.using(db).filter(app_label="accounts", model=model).exists():
            ContentType.objects.using(db).filter(app_label=old_app, model=model).update(
                app_label="accounts"
            )


def restore_content_types(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    db = schema_editor.connection.alias
    for old_app, model in MOVED:
        if not ContentType.objects.using(db).filter(app_label=old_app, model=model).exists():
            ContentType.objects.using(db).filter(app_label="accounts", model=model).update(
                app_label=old_app
            )


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("research", "0003_teams"),
        ("thinking", "0003_research_and_tokens"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="Team",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("name", models.CharField(max_length=100, unique=True)),
                        ("monthly_token_budget", models.PositiveBigIntegerField(blank=True, help_text="Tokens the team's shared sessions may use per month.", null=True)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                    ],
                    options={"db_table": "research_team", "ordering": ["name"]},
                ),
                migrations.CreateModel(
                    name="Membership",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("role", models.CharField(choices=[("owner", "Owner"), ("member", "Member")], default="member", max_length=8)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("user", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="team_memberships", to=settings.AUTH_USER_MODEL)),
                        ("team", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="memberships", to="accounts.team")),
                    ],
                    options={
                        "db_table": "research_membership",
                        "ordering": ["team", "role", "user"],
                        "constraints": [models.UniqueConstraint(fields=("team", "user"), name="membership_unique")],
                    },
                ),
                migrations.CreateModel(
                    name="ApiToken",
                    fields=[
                        ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                        ("name", models.CharField(max_length=100)),
                        ("prefix", models.CharField(help_text="The first characters, to recognise it.", max_length=12)),
                        ("hashed", models.CharField(max_length=64, unique=True)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("last_used_at", models.DateTimeField(blank=True, null=True)),
                        ("revoked_at", models.DateTimeField(blank=True, null=True)),
                        ("user", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="api_tokens", to=settings.AUTH_USER_MODEL)),
                    ],
                    options={"db_table": "thinking_apitoken", "ordering": ["-created_at"]},
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(move_content_types, restore_content_types),
        migrations.AlterField(
            model_name="team",
            name="name",
            field=models.CharField(max_length=100),
        ),
        migrations.AddField(
            model_name="membership",
            name="accepted_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="membership",
            name="offered_role",
            field=models.CharField(blank=True, choices=[("owner", "Owner"), ("member", "Member")], max_length=8),
        ),
        migrations.AddField(
            model_name="membership",
            name="invited_by",
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name="+", to=settings.AUTH_USER_MODEL),
        ),
        migrations.RunPython(accept_existing_members, migrations.RunPython.noop),
    ]
