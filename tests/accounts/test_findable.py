"""Where people find teams, invitations, notification settings, sharing, sign-up and
password reset (issue 67 item 4)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.urls import reverse

from accounts import teams
from accounts.models import NotificationPreference

pytestmark = pytest.mark.django_db


def test_teams_are_in_the_navigation_and_an_invitation_shows_on_any_page(
    client: Any, alice: Any, bob: Any
):
    client.force_login(alice)
    html = client.get(reverse("session-list")).content.decode()
    assert f'href="{reverse("team-list")}"' in html and "nav-invitations" not in html

    team = teams.create_team(bob, "Night owls")
    teams.invite_or_change(team, bob, "alice", "member")
    for page in (reverse("home"), reverse("session-list"), reverse("knowledge-list")):
        html = client.get(page).content.decode()
        assert re.search(r'id="nav-invitations">1 invitation</span>', html), page
        assert f'href="{reverse("team-list")}#invitations"' in html
    assert "Night owls" in client.get(reverse("team-list")).content.decode()

    teams.accept(alice, team.invitations.get(username="alice").pk)
    assert "nav-invitations" not in client.get(reverse("home")).content.decode()


def test_notification_settings_are_on_the_account_page_not_on_api_tokens(client: Any, alice: Any):
    client.force_login(alice)
    tokens = client.get(reverse("api-tokens")).content.decode()
    assert 'id="notification-settings"' not in tokens and 'id="webhook-key"' not in tokens
    assert f'href="{reverse("account")}"' in tokens
    account = client.get(reverse("account")).content.decode()
    assert 'id="notification-settings"' in account and 'id="webhook-key"' in account
    assert f'href="{reverse("password_change")}"' in account

    response = client.post(
        reverse("notification-settings"), {"mail": "always", "email": "alice@example.com"}
    )
    assert response.status_code == 302 and response["Location"] == reverse("account")
    assert NotificationPreference.objects.get(user=alice).mail == "always"
    made = client.post(reverse("webhook-key"))
    assert made.status_code == 200 and b'id="new-webhook-key"' in made.content
    assert "no-store" in made["Cache-Control"] or "no-cache" in made["Cache-Control"]


def test_the_start_forms_sharing_choice_is_outside_advanced(client: Any, alice: Any):
    teams.create_team(alice, "Lab")
    client.force_login(alice)
    html = client.get(reverse("home")).content.decode()
    advanced = html.split('<details class="advanced"')[1].split("</details>")[0]
    assert 'name="team"' in html and 'name="team"' not in advanced
    assert "Shared with" in html


def test_the_login_page_links_to_sign_up_only_when_it_is_open(client: Any, settings: Any):
    settings.DEEPTHINK_SIGNUP = False
    html = client.get(reverse("login")).content.decode()
    assert f'href="{reverse("signup")}"' not in html
    assert f'href="{reverse("password_reset")}"' in html
    settings.DEEPTHINK_SIGNUP = True
    html = client.get(reverse("login")).content.decode()
    assert f'href="{reverse("signup")}"' in html


def test_password_reset_mails_a_link_that_sets_a_new_password(
    client: Any, alice: Any, mailoutbox: list[Any]
):
    alice.email = "alice@example.com"
    alice.save()
    response = client.post(reverse("password_reset"), {"email": "alice@example.com"})
    assert response.status_code == 302
    assert [message.to for message in mailoutbox] == [["alice@example.com"]]
    link = re.search(r"https?://[^/]+(/\S+/set-password/|/\S+/)\s", mailoutbox[0].body)
    assert link, mailoutbox[0].body
    form = client.get(link.group(1), follow=True)
    assert form.status_code == 200
    done = client.post(
        form.redirect_chain[-1][0] if form.redirect_chain else link.group(1),
        {"new_password1": "a-new-pass-456", "new_password2": "a-new-pass-456"},
    )
    assert done.status_code == 302
    alice.refresh_from_db()
    assert alice.check_password("a-new-pass-456")
