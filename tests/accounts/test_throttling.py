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


# --- every password form, every address family (issue 73) -----------------------------------

ADMIN = "/admin/login/"


def admin_attempt(client: Any, username: str, password: str) -> Any:
    return client.post(ADMIN, {"username": username, "password": password, "next": "/admin/"})


def test_the_admin_login_answers_429_after_as_many_failures_as_the_site_login(
    admin_user: Any, settings: Any
):
    settings.DEEPTHINK_LOGIN_ATTEMPTS = 3
    client = Client()
    for _ in range(3):
        response = admin_attempt(client, "admin", "wrong")
        assert response.status_code == 200
        assert "Please enter the correct username and password" in response.text
    response = admin_attempt(client, "admin", "password")  # the right one, refused
    assert response.status_code == 429
    assert "Too many failed logins" in response.text
    assert "_auth_user_id" not in client.session


def test_the_admin_and_the_site_login_share_their_counts(admin_user: Any, settings: Any):
    settings.DEEPTHINK_LOGIN_ATTEMPTS = 4
    client = Client()
    for _ in range(2):
        assert attempt(client, "admin", "wrong") == 200
    for _ in range(2):
        assert admin_attempt(client, "admin", "wrong").status_code == 200
    assert attempt(client, "admin", "password") == 429
    assert admin_attempt(client, "admin", "password").status_code == 429


def test_the_admin_login_still_signs_staff_in_and_clears_the_count(admin_user: Any, settings: Any):
    settings.DEEPTHINK_LOGIN_ATTEMPTS = 3
    client = Client()
    for _ in range(2):
        admin_attempt(client, "admin", "wrong")
    response = admin_attempt(client, "admin", "password")
    assert response.status_code == 302 and "_auth_user_id" in client.session
    client.logout()
    for _ in range(2):
        admin_attempt(client, "admin", "wrong")
    assert admin_attempt(client, "admin", "password").status_code == 302


def test_ipv6_clients_are_counted_by_their_64(alice: Any, settings: Any):
    settings.DEEPTHINK_LOGIN_ATTEMPTS = 2  # 10 per client (five times as many)
    for n in range(10):  # ten addresses of one /64, ten usernames
        response = Client(REMOTE_ADDR=f"2001:db8:1:2::{n + 1:x}").post(
            URL, {"username": f"nobody{n}", "password": "wrong"}
        )
        assert response.status_code == 200
    good = {"username": "alice", "password": "alice-pass-123"}
    same_64 = Client(REMOTE_ADDR="2001:db8:1:2:ffff:ffff:ffff:fffe")
    assert same_64.post(URL, good).status_code == 429
    # The next /64 is another client.
    assert Client(REMOTE_ADDR="2001:db8:1:3::1").post(URL, good).status_code == 302


def test_an_ipv4_mapped_client_is_the_ipv4_client(alice: Any, settings: Any):
    settings.DEEPTHINK_LOGIN_ATTEMPTS = 2
    for _ in range(2):
        Client(REMOTE_ADDR="198.51.100.9").post(URL, {"username": "alice", "password": "wrong"})
    good = {"username": "alice", "password": "alice-pass-123"}
    assert Client(REMOTE_ADDR="::ffff:198.51.100.9").post(URL, good).status_code == 429
