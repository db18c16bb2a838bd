"""Owners see and revoke the invitations they sent, and no page tells whether an invited name
has an account (issue 67 item 4)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounts import teams
from accounts.models import Invitation, Membership, Role, Team

pytestmark = pytest.mark.django_db


def invite(client: Any, team: Team, username: str) -> Any:
    return client.post(team.get_absolute_url(), {"username": username, "role": Role.MEMBER})


def row(page: str, name: str) -> str:
    """The pending-invitations row for `name`, with the name and its id made neutral."""
    found = re.search(rf"<tr>\s*<td>{name}</td>.*?</tr>", page, re.S)
    assert found, name
    invitation = Invitation.objects.get(username=name)
    return found.group(0).replace(name, "X").replace(f"/invitations/{invitation.pk}/", "/ID/")


def test_owners_see_pending_invitations_to_known_and_unknown_names_alike(
    client: Any, alice: Any, carol: Any, lab: Team
):
    client.force_login(alice)
    invite(client, lab, "carol")
    invite(client, lab, "nobody")
    page = client.get(lab.get_absolute_url()).text
    assert 'id="pending-invitations"' in page
    assert row(page, "carol") == row(page, "nobody")
    assert "Revoke" in row(page, "carol")


def test_an_owner_revokes_an_invitation_and_the_invitee_no_longer_sees_it(
    client: Any, alice: Any, carol: Any, lab: Team
):
    client.force_login(alice)
    invite(client, lab, "carol")
    invitation = Invitation.objects.get()
    client.force_login(carol)
    assert 'id="nav-invitations">1 invitation' in client.get(reverse("home")).text

    client.force_login(alice)
    response = client.post(reverse("team-revoke-invitation", args=[lab.pk, invitation.pk]))
    assert response.status_code == 302
    page = client.get(response.url).text
    assert "Revoked the invitation to “carol”" in page and "<td>carol</td>" not in page
    assert "No pending invitations." in page

    client.force_login(carol)
    assert "nav-invitations" not in client.get(reverse("home")).text
    assert "Lab" not in client.get(reverse("team-list")).text
    accepted = client.post(reverse("team-invitation-answer", args=[invitation.pk, "accept"]))
    assert accepted.status_code == 404 and lab.role_of(carol) is None


def test_only_owners_may_revoke_everyone_else_gets_404(
    client: Any, alice: Any, bob: Any, carol: Any, lab: Team
):
    Membership.objects.create(team=lab, user=bob, role=Role.MEMBER, accepted_at=timezone.now())
    teams.invite_or_change(lab, alice, "carol", Role.MEMBER)
    invitation = Invitation.objects.get()
    url = reverse("team-revoke-invitation", args=[lab.pk, invitation.pk])
    for who in (bob, carol):  # a teammate; the invitee (not a member yet)
        client.force_login(who)
        assert client.post(url).status_code == 404
    client.force_login(bob)
    page = client.get(lab.get_absolute_url()).text
    assert 'id="pending-invitations"' not in page and "<td>carol</td>" not in page
    client.force_login(alice)
    assert client.get(url).status_code == 405  # revoking changes something: POST only
    other = teams.create_team(bob, "Elsewhere")
    elsewhere = reverse("team-revoke-invitation", args=[other.pk, invitation.pk])
    assert client.post(elsewhere).status_code == 404  # not through a team of someone else's
    assert Invitation.objects.filter(pk=invitation.pk).exists()


def test_revoking_needs_the_csrf_token(alice: Any, lab: Team):
    checked = Client(enforce_csrf_checks=True)
    checked.force_login(alice)
    teams.invite_or_change(lab, alice, "carol", Role.MEMBER)
    invitation = Invitation.objects.get()
    url = reverse("team-revoke-invitation", args=[lab.pk, invitation.pk])
    assert checked.post(url).status_code == 403
    assert Invitation.objects.filter(pk=invitation.pk).exists()


def test_someone_who_signs_up_later_with_the_invited_name_sees_the_invitation(
    client: Any, alice: Any, lab: Team, settings: Any
):
    teams.invite_or_change(lab, alice, "Dana", Role.OWNER)
    settings.DEEPTHINK_SIGNUP = True
    password = "a-long-pass-phrase-9"
    client.post(
        reverse("signup"),
        {"username": "dana", "email": "", "password1": password, "password2": password},
    )
    home = client.get(reverse("home")).text
    assert 'id="nav-invitations">1 invitation' in home  # the name matches without case
    page = client.get(reverse("team-list")).text
    assert "Invitation to <strong>Lab</strong>" in page and "as an owner" in page
    invitation = Invitation.objects.get()
    client.post(reverse("team-invitation-answer", args=[invitation.pk, "accept"]))
    dana = Membership.objects.get(team=lab, user__username="dana")
    assert (dana.role, dana.accepted_at is not None) == (Role.OWNER, True)
    assert not Invitation.objects.exists()


def test_no_page_differs_between_a_known_and_an_unknown_invited_name(
    client: Any, alice: Any, carol: Any, lab: Team
):
    """Everything an owner sees of an invitation (the answer, the team page, after the invitee
    declines, after revoking it), for "carol" (an account) and "nobody" (none): the same
    pages once the name and the invitation's id are set aside."""

    def neutral(page: str, name: str, invitation: Invitation) -> str:
        # Per-response secrets (CSRF token, CSP nonce) differ on every page anyway.
        page = re.sub(r'(csrfmiddlewaretoken" value|nonce" content|nonce)="[^"]+"', "", page)
        page = re.sub(r'"x-csrftoken": "[^"]+"', "", page)
        return page.replace(f"/invitations/{invitation.pk}/", "/ID/").replace(name, "X")

    client.force_login(alice)
    invitee = Client()  # carol, in her own browser: declines hers; nobody answers the other
    invitee.force_login(carol)

    def pages_for(name: str) -> list[str]:
        invited = client.post(
            lab.get_absolute_url(), {"username": name, "role": Role.MEMBER}, follow=True
        )
        invitation = Invitation.objects.get(username=name)
        again = client.post(
            lab.get_absolute_url(), {"username": name, "role": Role.OWNER}, follow=True
        )
        invitee.post(reverse("team-invitation-answer", args=[invitation.pk, "decline"]))
        after_answer = client.get(lab.get_absolute_url())
        revoke = reverse("team-revoke-invitation", args=[lab.pk, invitation.pk])
        revoked = client.post(revoke, follow=True)
        responses = [invited, again, after_answer, revoked]
        assert [r.status_code for r in responses] == [200] * 4
        assert not Invitation.objects.exists()
        return [neutral(r.content.decode(), name, invitation) for r in responses]

    carols, nobodys = pages_for("carol"), pages_for("nobody")
    assert "<td>X</td>" in carols[0] and "<td>X</td>" not in carols[3]
    assert carols == nobodys
