from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse
from django.utils import timezone

from accounts.models import Invitation, Membership, Role, Team

pytestmark = pytest.mark.django_db


def test_creating_a_team_makes_you_its_owner(client: Any, alice: Any):
    client.force_login(alice)
    response = client.post(reverse("team-list"), {"name": "Dream team"})
    team = Team.objects.get()
    assert response.status_code == 302 and response.url == team.get_absolute_url()
    assert team.role_of(alice) == Role.OWNER


def test_a_duplicate_name_among_my_teams_is_explained(client: Any, alice: Any, lab: Team):
    client.force_login(alice)
    response = client.post(reverse("team-list"), {"name": "lab"})
    assert (
        response.status_code == 422 and "already belong to a team with that name" in response.text
    )


def test_creating_a_team_does_not_tell_whether_someone_elses_name_exists(
    client: Any, bob: Any, lab: Team
):
    client.force_login(bob)
    response = client.post(reverse("team-list"), {"name": "Lab"})
    assert response.status_code == 302
    assert Team.objects.filter(name__iexact="lab").count() == 2


def invite(client: Any, team: Team, username: str, role: str = "member") -> str:
    return client.post(
        team.get_absolute_url(), {"username": username, "role": role}, follow=True
    ).text


def test_an_invitee_joins_only_by_accepting(client: Any, alice: Any, carol: Any, lab: Team):
    client.force_login(alice)
    said = invite(client, lab, "carol")
    assert "Invited “carol”" in said
    assert lab.role_of(carol) is None
    assert lab.memberships.filter(user=carol).count() == 0  # not a member
    client.force_login(carol)
    page = client.get(reverse("team-list")).text
    assert "Invitation to" in page and "Lab" in page
    assert client.get(lab.get_absolute_url()).status_code == 404  # not a member yet
    invitation = Invitation.objects.get(team=lab, username="carol")
    client.post(reverse("team-invitation-answer", args=[invitation.pk, "accept"]))
    assert lab.role_of(carol) == Role.MEMBER
    assert client.get(lab.get_absolute_url()).status_code == 200
    assert not Invitation.objects.exists()  # accepted: a member now, no longer pending


def test_a_declined_invitation_is_gone_for_the_invitee_not_for_the_owner(
    client: Any, alice: Any, carol: Any, lab: Team
):
    client.force_login(alice)
    invite(client, lab, "carol")
    client.force_login(carol)
    invitation = Invitation.objects.get(team=lab, username="carol")
    client.post(reverse("team-invitation-answer", args=[invitation.pk, "decline"]))
    assert not Membership.objects.filter(team=lab, user=carol).exists()
    assert "nav-invitations" not in client.get(reverse("home")).text
    assert "Lab" not in client.get(reverse("team-list")).text
    again = client.post(reverse("team-invitation-answer", args=[invitation.pk, "accept"]))
    assert again.status_code == 404 and lab.role_of(carol) is None
    # Still listed to the owner, as an invitation to a name nobody has would be.
    client.force_login(alice)
    assert "<td>carol</td>" in client.get(lab.get_absolute_url()).text


def test_nobody_else_can_answer_my_invitation(
    client: Any, alice: Any, bob: Any, carol: Any, lab: Team
):
    client.force_login(alice)
    invite(client, lab, "carol")
    invitation = Invitation.objects.get(team=lab, username="carol")
    client.force_login(bob)
    for answer in ("accept", "decline"):
        response = client.post(reverse("team-invitation-answer", args=[invitation.pk, answer]))
        assert response.status_code == 404
    assert lab.role_of(carol) is None and Invitation.objects.get().declined_at is None


def test_unknown_and_known_usernames_get_the_same_answer(
    client: Any, alice: Any, carol: Any, lab: Team
):
    client.force_login(alice)
    said = {}
    for name in ("carol", "nobody"):
        response = client.post(lab.get_absolute_url(), {"username": name, "role": "member"})
        page = client.get(response.url)
        said[name] = (
            response.status_code,
            [str(m).replace(name, "X") for m in page.context["messages"]],
        )
    assert said["carol"] == said["nobody"] == (302, [said["carol"][1][0]])
    assert set(Invitation.objects.values_list("username", flat=True)) == {"carol", "nobody"}


def test_ownership_is_only_offered_until_accepted(client: Any, alice: Any, carol: Any, lab: Team):
    client.force_login(alice)
    invite(client, lab, "carol", role="owner")
    client.force_login(carol)
    invitation = Invitation.objects.get(team=lab, username="carol")
    assert lab.role_of(carol) is None
    client.post(reverse("team-invitation-answer", args=[invitation.pk, "accept"]))
    assert lab.role_of(carol) == Role.OWNER
    # An accepted member offered ownership stays a member until they accept it.
    dana = type(carol).objects.create_user("dana", password="dana-pass-123")
    Membership.objects.create(accepted_at=timezone.now(), team=lab, user=dana)
    client.force_login(alice)
    said = invite(client, lab, "dana", role="owner")
    assert "Offered dana ownership" in said and lab.role_of(dana) == Role.MEMBER
    client.force_login(dana)
    offer = Membership.objects.get(team=lab, user=dana)
    assert "Ownership of" in client.get(reverse("team-list")).text
    client.post(reverse("team-offer-answer", args=[offer.pk, "decline"]))
    assert lab.role_of(dana) == Role.MEMBER
    client.force_login(alice)
    invite(client, lab, "dana", role="owner")
    client.force_login(dana)
    client.post(reverse("team-offer-answer", args=[offer.pk, "accept"]))
    assert lab.role_of(dana) == Role.OWNER


def test_the_last_owner_cannot_demote_themselves(client: Any, alice: Any, lab: Team):
    client.force_login(alice)
    response = client.post(lab.get_absolute_url(), {"username": "alice", "role": "member"})
    assert response.status_code == 422 and "A team needs an owner" in response.text
    assert lab.role_of(alice) == Role.OWNER


def test_members_cannot_change_the_team(client: Any, carol: Any, bob: Any, lab: Team):
    Membership.objects.create(accepted_at=timezone.now(), team=lab, user=carol)
    client.force_login(carol)
    assert client.get(lab.get_absolute_url()).status_code == 200
    response = client.post(lab.get_absolute_url(), {"username": "bob", "role": "owner"})
    assert response.status_code == 403 and lab.role_of(bob) is None


def test_outsiders_do_not_see_the_team(client: Any, bob: Any, lab: Team):
    client.force_login(bob)
    assert client.get(lab.get_absolute_url()).status_code == 404
    assert "Lab" not in client.get(reverse("team-list")).text


def test_members_can_leave_but_the_last_owner_cannot(
    client: Any, alice: Any, carol: Any, lab: Team
):
    Membership.objects.create(accepted_at=timezone.now(), team=lab, user=carol)
    client.force_login(carol)
    client.post(reverse("team-remove-member", args=[lab.pk, carol.pk]))
    assert lab.role_of(carol) is None
    client.force_login(alice)
    response = client.post(reverse("team-remove-member", args=[lab.pk, alice.pk]), follow=True)
    assert "A team needs an owner" in response.text and lab.role_of(alice) == Role.OWNER


def test_a_note_can_be_shared_with_one_of_my_teams(client: Any, alice: Any, lab: Team):
    from research.models import KnowledgeItem

    client.force_login(alice)
    page = client.get(reverse("knowledge-list")).text
    assert "Shared with" in page and "Only me" in page
    client.post(reverse("knowledge-add"), {"title": "T", "body": "B", "team": lab.pk})
    assert KnowledgeItem.objects.get().team == lab


def test_a_note_cannot_be_shared_with_someone_elses_team(client: Any, bob: Any, lab: Team):
    from research.models import KnowledgeItem

    Team.objects.create(name="Bob's")
    client.force_login(bob)
    response = client.post(reverse("knowledge-add"), {"title": "T", "body": "B", "team": lab.pk})
    assert not KnowledgeItem.objects.filter(team=lab).exists()
    assert response.status_code in (302, 422)


def test_signup_is_closed_unless_turned_on(client: Any, settings: Any, django_user_model: Any):
    assert client.get(reverse("signup")).status_code == 404
    settings.DEEPTHINK_SIGNUP = True
    response = client.post(
        reverse("signup"),
        {"username": "dana", "email": "d@example.com",
         "password1": "a-long-pass-phrase-9", "password2": "a-long-pass-phrase-9"},
    )  # fmt: skip
    assert (
        response.status_code == 302 and django_user_model.objects.filter(username="dana").exists()
    )


def test_password_reset_pages_match_the_app(client: Any, alice: Any, mailoutbox: Any):
    alice.email = "alice@example.com"
    alice.save()
    page = client.get(reverse("password_reset")).text
    assert "Reset your password" in page and "Deep Think" in page
    client.post(reverse("password_reset"), {"email": "alice@example.com"})
    assert len(mailoutbox) == 1 and "/accounts/reset/" in mailoutbox[0].body


def test_the_remove_route_tells_nothing_about_pending_invitees(
    client: Any, alice: Any, carol: Any, django_user_model: Any, lab: Team
):
    """An owner trying ids on the remove route learns no username and no account: a pending
    invitee answers as an id with nobody behind it does, and the invitation stays."""
    client.force_login(alice)
    client.post(lab.get_absolute_url(), {"username": "carol", "role": Role.MEMBER})
    invited = Invitation.objects.get(team=lab, username="carol")
    nobody = django_user_model.objects.order_by("-pk").first().pk + 100

    pending = client.post(reverse("team-remove-member", args=[lab.pk, carol.pk]))
    missing = client.post(reverse("team-remove-member", args=[lab.pk, nobody]))
    assert pending.status_code == missing.status_code == 404
    assert "carol" not in pending.text
    assert pending.text == missing.text.replace(str(nobody), str(carol.pk))
    assert Invitation.objects.filter(pk=invited.pk).exists()
