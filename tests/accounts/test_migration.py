"""Moving teams, memberships and tokens into `accounts` keeps every existing row."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [
    ("research", "0003_teams"),
    ("thinking", "0006_session_team"),
    ("accounts", None),
]


@pytest.fixture
def before_move(transactional_db: Any) -> Any:
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    yield (
        MigrationExecutor(connection)
        .loader.project_state([(app, name) for app, name in BEFORE if name])
        .apps
    )
    call_command("migrate", verbosity=0)  # leave the database as other tests expect it


def test_rows_survive_the_move_to_accounts(before_move: Any) -> None:
    old = before_move
    user = old.get_model("auth", "User").objects.create(username="carol", password="x")
    team = old.get_model("research", "Team").objects.create(name="Lab", monthly_token_budget=99)
    old.get_model("research", "Membership").objects.create(team=team, user=user, role="owner")
    old.get_model("research", "KnowledgeItem").objects.create(
        owner=user, team=team, title="Tides", body="The moon."
    )
    session = old.get_model("thinking", "ThinkingSession").objects.create(
        owner=user,
        team=team,
        question="Why tides?",
        budget_seconds=60,
        synthesis_interval_seconds=15,
        model_id="m",
    )
    old.get_model("thinking", "ApiToken").objects.create(
        user=user, name="CI", prefix="dt_abc", hashed="h" * 64
    )

    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())

    from accounts.models import ApiToken, Membership, Team
    from research.models import KnowledgeItem
    from thinking.models import ThinkingSession

    moved = Team.objects.get(pk=team.pk)
    assert (moved.name, moved.monthly_token_budget) == ("Lab", 99)
    membership = Membership.objects.get(team=moved)
    # Members from before invitations existed stay members: they count as having accepted.
    assert (membership.user.username, membership.role) == ("carol", "owner")
    assert membership.accepted_at is not None
    assert list(Team.objects.of(membership.user)) == [moved]
    assert KnowledgeItem.objects.get(title="Tides").team == moved
    assert ThinkingSession.objects.get(pk=session.pk).team == moved
    assert ApiToken.objects.get(name="CI").user.username == "carol"
