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


@pytest.fixture
def before_invitations(transactional_db: Any) -> Any:
    target = [("accounts", "0004_webhook_secret")]
    executor = MigrationExecutor(connection)
    executor.migrate(target)
    yield MigrationExecutor(connection).loader.project_state(target).apps
    call_command("migrate", verbosity=0)


def test_pending_memberships_become_invitations_that_still_work(before_invitations: Any) -> None:
    old = before_invitations
    users = old.get_model("auth", "User").objects
    alice, carol = users.create(username="alice"), users.create(username="carol")
    team = old.get_model("accounts", "Team").objects.create(name="Lab")
    memberships = old.get_model("accounts", "Membership").objects
    memberships.create(team=team, user=alice, role="owner", accepted_at="2026-01-01T00:00Z")
    memberships.create(team=team, user=carol, offered_role="owner", invited_by=alice)

    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())

    from django.contrib.auth import get_user_model

    from accounts import teams
    from accounts.models import Invitation, Membership, Role

    invitation = Invitation.objects.get()
    assert (invitation.username, invitation.role, invitation.invited_by_id) == (
        "carol",
        Role.OWNER,
        alice.pk,
    )
    assert list(Membership.objects.values_list("user__username", flat=True)) == ["alice"]
    carol_now = get_user_model().objects.get(username="carol")
    assert teams.pending_count(carol_now) == 1
    teams.accept(carol_now, invitation.pk)
    assert Membership.objects.get(user=carol_now).role == Role.OWNER
