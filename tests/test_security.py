"""Security defaults: production settings pass `check --deploy`, logins are throttled, and
live pages hold no more access than their user has."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.urls import reverse

from tests.helpers import add_thought, communicator, login
from thinking.events import SessionEvent
from thinking.models import Status
from thinking.page.broadcast import publish

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("preload", ["0", "1"])
def test_production_settings_pass_check_deploy(tmp_path: Path, preload: str):
    # Without opting in to HSTS preload too: W021 is silenced on purpose (settings, README).
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_", "REDIS_"))}
    env.update(
        DEBUG="0",
        SECRET_KEY=secrets.token_urlsafe(60),
        ALLOWED_HOSTS="deepthink.example.com",
        SECURE_HSTS_PRELOAD=preload,
        SQLITE_PATH=str(tmp_path / "deploy.sqlite3"),
    )
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


@pytest.mark.django_db
def test_repeated_failed_logins_are_refused_for_a_while(client: Any, alice: Any, settings: Any):
    settings.DEEPTHINK_LOGIN_ATTEMPTS = 3
    url = reverse("login")
    for _ in range(3):
        response = client.post(url, {"username": "alice", "password": "wrong"})
        assert response.status_code == 200
    response = client.post(url, {"username": "alice", "password": "alice-pass-123"})
    assert response.status_code == 429
    assert "Too many failed logins" in response.content.decode()
    assert "_auth_user_id" not in client.session


@pytest.mark.django_db
def test_a_good_login_clears_the_count(client: Any, alice: Any, settings: Any):
    settings.DEEPTHINK_LOGIN_ATTEMPTS = 3
    url = reverse("login")
    for _ in range(2):
        client.post(url, {"username": "alice", "password": "wrong"})
    assert client.post(url, {"username": "alice", "password": "alice-pass-123"}).status_code == 302
    client.logout()
    for _ in range(2):
        client.post(url, {"username": "alice", "password": "wrong"})
    assert client.post(url, {"username": "alice", "password": "alice-pass-123"}).status_code == 302


@pytest.mark.django_db
def test_posts_without_a_csrf_token_are_refused(make_session: Any, alice: Any):
    from django.test import Client

    session = make_session(status=Status.THINKING)
    client = Client(enforce_csrf_checks=True)
    client.force_login(alice)
    for name in ("session-pause", "session-cancel", "session-steer"):
        assert client.post(reverse(name, args=[session.pk])).status_code == 403
    htmx = client.post(reverse("session-pause", args=[session.pk]), headers={"HX-Request": "true"})
    assert htmx.status_code == 403
    session.refresh_from_db()
    assert session.status == Status.THINKING


@pytest.mark.django_db(transaction=True)
async def test_a_page_stops_receiving_after_its_user_logs_out(
    make_session: Any, alice: Any, settings: Any
):
    from django.contrib.sessions.models import Session

    settings.DEEPTHINK_WS_RECHECK_SECONDS = 0
    session = await sync_to_async(make_session)(status=Status.THINKING)
    cookie = await login(alice)
    comm = communicator(session.pk, cookie, rev=0)
    assert (await comm.connect())[0]
    await Session.objects.filter(session_key=cookie).adelete()  # logged out elsewhere

    await add_thought(session, 0, "must not arrive")
    await publish(SessionEvent(session.pk, thoughts=(0,)))
    output = await comm.receive_output(timeout=2)
    assert output["type"] == "websocket.close" and output["code"] == 4403


@pytest.mark.django_db(transaction=True)
async def test_a_huge_frame_closes_the_socket(make_session: Any, alice: Any):
    session = await sync_to_async(make_session)(revision=0)
    comm = communicator(session.pk, await login(alice), rev=0)
    assert (await comm.connect())[0]
    await comm.send_to(text_data="x" * 100_000)
    output = await comm.receive_output(timeout=2)
    assert output["type"] == "websocket.close" and output["code"] == 4413


@pytest.mark.django_db(transaction=True)
async def test_a_page_stops_receiving_after_its_user_is_deactivated(
    make_session: Any, alice: Any, settings: Any
):
    settings.DEEPTHINK_WS_RECHECK_SECONDS = 0
    session = await sync_to_async(make_session)(status=Status.THINKING)
    comm = communicator(session.pk, await login(alice), rev=0)
    assert (await comm.connect())[0]
    alice.is_active = False
    await alice.asave(update_fields=["is_active"])

    await add_thought(session, 0, "must not arrive")
    await publish(SessionEvent(session.pk, thoughts=(0,)))
    output = await comm.receive_output(timeout=2)
    assert output["type"] == "websocket.close" and output["code"] == 4403


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("origin", "host", "connects"),
    [
        ("http://testserver", "testserver", True),
        ("http://testserver:8000", "testserver:8000", True),
        ("https://testserver", "testserver:443", True),
        ("http://testserver:8001", "testserver:8000", False),  # another app on the host
        ("http://testserver:8001", "testserver", False),
        ("http://testserver", "testserver:8000", False),
        ("null", "testserver", False),
    ],
)
async def test_the_websocket_origin_check_includes_the_port(
    make_session: Any, alice: Any, origin: str, host: str, connects: bool
):
    from channels.testing import WebsocketCommunicator

    from config.asgi import application
    from thinking.page.presenters import session_ws_path

    session = await sync_to_async(make_session)()
    headers = [
        (b"origin", origin.encode()),
        (b"host", host.encode()),
        (b"cookie", f"sessionid={await login(alice)}".encode()),
    ]
    comm = WebsocketCommunicator(application, session_ws_path(session.pk), headers=headers)
    connected, _ = await comm.connect()
    assert connected is connects
    if connected:
        await comm.disconnect()
