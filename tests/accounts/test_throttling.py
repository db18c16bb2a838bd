"""Login throttling counts the real client, as far as trusted proxies say (issue 21)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from accounts.clients import client_address

pytestmark = pytest.mark.django_db

URL = "/accounts/login/"


def attempt(client: Any, username: str, password: str, forwarded: str = "") -> int:
    headers = {"X-Forwarded-For": forwarded} if forwarded else {}
    return client.post(
        URL, {"username": username, "password": password}, headers=headers
    ).status_code


def test_without_a_trusted_proxy_x_forwarded_for_changes_nothing(alice: Any, settings: Any):
    settings.DEEPTHINK_LOGIN_ATTEMPTS = 3
    client = Client()
    for n in range(3):
        attempt(client, "alice", "wrong", forwarded=f"10.0.0.{n}")
    # A fresh forged address does not buy fresh attempts.
    assert attempt(client, "alice", "alice-pass-123", forwarded="10.9.9.9") == 429


def test_behind_a_proxy_one_clients_failures_do_not_lock_out_another(alice: Any, settings: Any):
    settings.DEEPTHINK_TRUSTED_PROXY_COUNT = 1
    settings.DEEPTHINK_LOGIN_ATTEMPTS = 3
    attacker, alice_client = Client(), Client()
    for n in range(20):  # random names: the per-address cap (5 x 3) is reached
        attempt(attacker, f"nobody{n}", "wrong", forwarded="203.0.113.7")
    assert attempt(attacker, "alice", "alice-pass-123", forwarded="203.0.113.7") == 429
    assert attempt(alice_client, "alice", "alice-pass-123", forwarded="198.51.100.2") == 302


def test_failures_on_a_username_do_not_lock_that_user_out_elsewhere(alice: Any, settings: Any):
    settings.DEEPTHINK_TRUSTED_PROXY_COUNT = 1
    settings.DEEPTHINK_LOGIN_ATTEMPTS = 3
    for _ in range(5):
        attempt(Client(), "alice", "wrong", forwarded="203.0.113.7")
    assert attempt(Client(), "alice", "alice-pass-123", forwarded="203.0.113.7") == 429
    assert attempt(Client(), "alice", "alice-pass-123", forwarded="198.51.100.2") == 302


def test_entries_the_client_wrote_are_ignored(settings: Any):
    meta = {"REMOTE_ADDR": "10.0.0.1", "HTTP_X_FORWARDED_FOR": "6.6.6.6, 198.51.100.2"}
    assert client_address(meta, trusted_proxies=0) == "10.0.0.1"
    assert client_address(meta, trusted_proxies=1) == "198.51.100.2"
    assert client_address(meta, trusted_proxies=2) == "6.6.6.6"
    # Fewer hops than proxies, or garbage: the connection's own address.
    assert client_address(meta, trusted_proxies=3) == "10.0.0.1"
    assert client_address({**meta, "HTTP_X_FORWARDED_FOR": "not-an-ip"}, 1) == "10.0.0.1"


def test_the_login_page_still_signs_people_in(client: Any, alice: Any):
    response = client.post(reverse("login"), {"username": "alice", "password": "alice-pass-123"})
    assert response.status_code == 302 and "_auth_user_id" in client.session


def test_the_middleware_gives_everything_after_it_the_real_client(settings: Any):
    from django.http import HttpResponse
    from django.test import RequestFactory

    from accounts.clients import TrustedProxyMiddleware

    seen: list[str] = []

    def view(request: Any) -> HttpResponse:
        seen.append(request.META["REMOTE_ADDR"])
        return HttpResponse()

    middleware = TrustedProxyMiddleware(view)
    request = RequestFactory().get("/", headers={"X-Forwarded-For": "6.6.6.6, 198.51.100.2"})
    middleware(request)
    settings.DEEPTHINK_TRUSTED_PROXY_COUNT = 1
    request = RequestFactory().get("/", headers={"X-Forwarded-For": "6.6.6.6, 198.51.100.2"})
    middleware(request)
    assert seen == ["127.0.0.1", "198.51.100.2"]
