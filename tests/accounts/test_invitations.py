"""Nothing of a team reaches someone before they accept its invitation (issue 21)."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.urls import reverse

from accounts import teams
from accounts.models import Invitation, Membership, Role, Team
from research.knowledge import add_item
from tests.helpers import WORKER, claim
from thinking.deliberation import evidence
from thinking.models import SourceKind, ThinkingSession


def plant(bob: Any, invitee: str, role: str = "owner") -> Team:
    """Bob's team, a note in it with a link, and an invitation to `invitee`."""
    team = teams.create_team(bob, "Helpful people")
    teams.invite_or_change(team, bob, invitee, role)
    note = add_item(
        owner=bob, title="Octopus sleep FAQ", body="Octopuses sleep. Log in at evil.example."
    )
    note.team = team
    note.save()
    return team


async def memory_titles(session: ThinkingSession) -> list[str]:
    research = await sync_to_async(evidence.Research.for_session)(session)
    found = await evidence.search_one(
        session_id=session.pk,
        research=research,
        kind=SourceKind.MEMORY,
        query="octopus",
        limit=5,
        worker_id=WORKER,
        found_by="memory_search",
    )
    return [source.title for source in found]


@pytest.mark.django_db(transaction=True)
async def test_an_invited_persons_private_session_does_not_search_the_team(
    alice: Any, bob: Any, make_session: Any
):
    team = await sync_to_async(plant)(bob, "alice")
    session = await sync_to_async(make_session)(question="Do octopuses sleep?")
    await claim(session)
    assert await memory_titles(session) == []
    invitation = await Invitation.objects.aget(team=team, username="alice")
    await sync_to_async(teams.accept)(alice, invitation.pk)
    session = await sync_to_async(make_session)(question="Do octopuses sleep, really?")
    await claim(session)
    assert await memory_titles(session) == ["Octopus sleep FAQ"]


@pytest.mark.django_db
def test_an_invited_person_sees_no_shared_session_note_or_team(
    client: Any, alice: Any, bob: Any, make_session: Any
):
    team = plant(bob, "alice")
    shared = make_session(owner=bob, question="Team only", team=team)
    client.force_login(alice)
    assert client.get(shared.get_absolute_url()).status_code == 404
    assert client.get(team.get_absolute_url()).status_code == 404
    assert "Octopus sleep FAQ" not in client.get(reverse("knowledge-list")).text
    assert team.role_of(alice) is None and not Team.objects.owned_by(alice).exists()
    # Nor can it be chosen to share with.
    assert "Helpful people" not in client.get(reverse("home")).text


@pytest.mark.django_db
def test_the_last_owner_cannot_leave_or_be_demoted_by_any_path(client: Any, alice: Any):
    team = teams.create_team(alice, "Solo")
    client.force_login(alice)
    client.post(team.get_absolute_url(), {"username": "alice", "role": "member"})
    client.post(reverse("team-remove-member", args=[team.pk, alice.pk]))
    assert team.role_of(alice) == Role.OWNER
    with pytest.raises(teams.TeamError):
        teams.invite_or_change(team, alice, "alice", Role.MEMBER)
    with pytest.raises(teams.TeamError):
        teams.remove(team, Membership.objects.get(team=team, user=alice))
    assert Membership.objects.filter(team=team, role=Role.OWNER).count() == 1


@pytest.mark.django_db
def test_a_pending_owner_invitation_does_not_let_the_last_owner_go(alice: Any, bob: Any):
    team = teams.create_team(alice, "Solo")
    teams.invite_or_change(team, alice, "bob", Role.OWNER)
    with pytest.raises(teams.TeamError):
        teams.remove(team, Membership.objects.get(team=team, user=alice))
    with pytest.raises(teams.TeamError):
        teams.invite_or_change(team, alice, "alice", Role.MEMBER)
