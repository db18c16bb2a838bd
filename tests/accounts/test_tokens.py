from __future__ import annotations

from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
import time_machine
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounts.models import ApiToken
from accounts.tokens import create_token, hash_token, revoke_token, verify_token

pytestmark = pytest.mark.django_db

PAGE = "/settings/tokens/"


def revoke_url(token: ApiToken) -> str:
    return reverse("api-token-revoke", args=[token.pk])


@pytest.fixture
def alice_client(client: Client, alice: Any) -> Client:
    client.force_login(alice)
    return client


# --- the module --------------------------------------------------------------------------


def test_only_a_hash_is_stored(alice: Any):
    token, secret = create_token(alice, "script")
    assert secret.startswith("dt_") and len(secret) > 40
    assert token.hashed == hash_token(secret) != secret
    assert token.prefix == secret[:10]
    assert secret not in str(ApiToken.objects.values().get())


def test_verify_returns_the_owner(alice: Any):
    assert verify_token(create_token(alice, "script")[1]) == alice


@pytest.mark.parametrize(
    "secret", ["", "dt_", "dt_unknown", "not-even-prefixed", "dt_" + "x" * 500]
)
def test_verify_refuses_unknown_tokens(alice: Any, secret: str):
    create_token(alice, "script")
    assert verify_token(secret) is None


def test_verify_refuses_revoked_tokens(alice: Any):
    token, secret = create_token(alice, "script")
    revoke_token(token)
    assert verify_token(secret) is None


def test_revoking_twice_keeps_the_first_time(alice: Any):
    token, _ = create_token(alice, "script")
    revoke_token(token)
    first = ApiToken.objects.get().revoked_at
    revoke_token(ApiToken.objects.get())
    assert ApiToken.objects.get().revoked_at == first


def test_last_used_is_written_at_most_once_a_minute(alice: Any):
    token, secret = create_token(alice, "script")
    start = timezone.now()
    with time_machine.travel(start, tick=False):
        verify_token(secret)
    with time_machine.travel(start + timedelta(seconds=30), tick=False):
        verify_token(secret)
    token.refresh_from_db()
    assert token.last_used_at == start
    later = start + timedelta(seconds=61)
    with time_machine.travel(later, tick=False):
        verify_token(secret)
    token.refresh_from_db()
    assert token.last_used_at == later


# --- the page ----------------------------------------------------------------------------


def test_the_page_requires_login(client: Client):
    response = client.get(PAGE)
    assert response.status_code == 302 and reverse("login") in response.url


def test_revoking_requires_login(client: Client, alice: Any):
    token, _ = create_token(alice, "script")
    assert client.post(revoke_url(token)).status_code == 302
    token.refresh_from_db()
    assert token.revoked_at is None


def test_the_page_has_an_empty_state(alice_client: Client):
    page = alice_client.get(PAGE).content.decode()
    assert "You have no API tokens yet." in page


def test_the_page_is_in_the_nav(alice_client: Client):
    assert f'href="{PAGE}"' in alice_client.get(reverse("home")).content.decode()


def test_creating_shows_the_token_once(alice_client: Client, alice: Any):
    response = alice_client.post(PAGE, {"name": "laptop"})
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    page = response.content.decode()
    secret = page.split('id="new-token-value" type="text" value="')[1].split('"')[0]
    assert "Copy it now" in page
    assert verify_token(secret) == alice
    assert ApiToken.objects.get().name == "laptop"
    later = alice_client.get(PAGE).content.decode()
    assert secret not in later
    assert "laptop" in later and secret[:10] in later


def test_a_token_needs_a_name(alice_client: Client):
    response = alice_client.post(PAGE, {"name": "  "})
    assert response.status_code == 422
    assert not ApiToken.objects.exists()


def test_names_are_escaped(alice_client: Client, alice: Any):
    create_token(alice, "<script>alert(1)</script>")
    page = alice_client.get(PAGE).content.decode()
    assert "<script>alert(1)" not in page
    assert "&lt;script&gt;alert(1)" in page


def test_the_page_lists_only_your_tokens(alice_client: Client, bob: Any):
    create_token(bob, "bobs-secret-script")
    assert "bobs-secret-script" not in alice_client.get(PAGE).content.decode()


def test_revoke(alice_client: Client, alice: Any):
    token, secret = create_token(alice, "script")
    response = alice_client.post(revoke_url(token))
    assert response.status_code == 302 and response.url == PAGE
    assert verify_token(secret) is None
    assert "Revoked" in alice_client.get(PAGE).content.decode()


def test_revoking_another_users_token_is_404(alice_client: Client, bob: Any):
    token, secret = create_token(bob, "script")
    assert alice_client.post(revoke_url(token)).status_code == 404
    assert verify_token(secret) == bob


def test_revoke_refuses_get(alice_client: Client, alice: Any):
    token, _ = create_token(alice, "script")
    assert alice_client.get(revoke_url(token)).status_code == 405


def test_the_page_refuses_put(alice_client: Client):
    assert alice_client.put(PAGE).status_code == 405


# --- the command -------------------------------------------------------------------------


def test_the_command_prints_only_a_working_token(alice: Any):
    out = StringIO()
    call_command("create_api_token", "alice", "--name", "cron", stdout=out)
    secret = out.getvalue().strip()
    assert out.getvalue() == secret + "\n"
    assert ApiToken.objects.get().name == "cron"
    response = Client(headers={"Authorization": f"Bearer {secret}"}).get("/api/sessions")
    assert response.status_code == 200


def test_the_command_refuses_an_unknown_user(db: Any):
    with pytest.raises(CommandError, match="no user 'nobody'"):
        call_command("create_api_token", "nobody", stdout=StringIO())
    assert not ApiToken.objects.exists()


def test_the_command_refuses_an_inactive_user(alice: Any):
    alice.is_active = False
    alice.save()
    with pytest.raises(CommandError, match="inactive"):
        call_command("create_api_token", "alice", stdout=StringIO())


# --- the admin ---------------------------------------------------------------------------


def test_the_admin_shows_tokens_but_never_the_hash(admin_client: Client, alice: Any):
    token, _ = create_token(alice, "script")
    listing = admin_client.get(reverse("admin:accounts_apitoken_changelist")).content.decode()
    change = admin_client.get(reverse("admin:accounts_apitoken_change", args=[token.pk]))
    assert "script" in listing and token.prefix in listing
    assert token.hashed not in listing + change.content.decode()
    assert 'name="hashed"' not in change.content.decode()


def test_the_admin_revokes_selected_tokens(admin_client: Client, alice: Any):
    token, secret = create_token(alice, "script")
    admin_client.post(
        reverse("admin:accounts_apitoken_changelist"),
        {"action": "revoke", "_selected_action": [token.pk]},
    )
    assert verify_token(secret) is None
