"""Hearing when a session ends (#19): a mail through a real local SMTP server, a signed
webhook to a real local HTTP server, retries that survive a restart, and refusal of
private, loopback and link-local targets, also behind a redirect."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from datetime import timedelta
from email import message_from_bytes
from email.policy import default as default_policy
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import StringIO
from typing import Any
from urllib.parse import urlsplit

import pytest
from aiosmtpd.controller import Controller
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from accounts import webhook_secrets
from accounts.models import MailChoice, NotificationPreference
from fakes.anthropic_server import HttpError, Reply
from tests.helpers import prompt_of
from thinking.deliberation.worker import Supervisor
from thinking.models import CompletionReason, Delivery, DeliveryStatus, Status, ThinkingSession
from thinking.people import notify, webhooks

pytestmark = pytest.mark.django_db(transaction=True)


def think(*args: str) -> None:
    call_command("think", *args, stdout=StringIO(), stderr=StringIO())


# --- real local servers -------------------------------------------------------------------


class Inbox:
    def __init__(self) -> None:
        self.messages: list[Any] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        message = message_from_bytes(envelope.original_content, policy=default_policy)
        self.messages.append((envelope.rcpt_tos, message))
        return "250 OK"


@pytest.fixture
def smtp(settings: Any) -> Iterator[Inbox]:
    """A real SMTP server on 127.0.0.1; Django's SMTP backend sends to it."""
    inbox = Inbox()
    with socket.socket() as probe:  # a free port: the controller checks it is up by connecting
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    settings.MAILERS = {
        "default": {
            "BACKEND": "django.core.mail.backends.smtp.EmailBackend",
            "OPTIONS": {"host": "127.0.0.1", "port": controller.port, "timeout": 5},
        }
    }
    settings.DEEPTHINK_BASE_URL = "https://think.example.org"
    yield inbox
    controller.stop()


class Hook:
    """A real HTTP server on 127.0.0.1 recording each POST; `answers` scripts the replies."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self.answers: list[tuple[int, dict[str, str]]] = []
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                hook.received.append(
                    {"path": self.path, "headers": dict(self.headers), "body": body}
                )
                status, headers = hook.answers.pop(0) if hook.answers else (204, {})
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

        self.key = ""  # alice's webhook signing key

    def url(self, path: str = "/hook", host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"


@pytest.fixture
def hook(settings: Any, alice: Any) -> Iterator[Hook]:
    # Loopback is refused unless listed: the test server's address is listed explicitly.
    settings.DEEPTHINK_WEBHOOK_ALLOWED_HOSTS = ["127.0.0.1"]
    settings.DEEPTHINK_WEBHOOK_BACKOFF_SECONDS = 0
    server = Hook()
    server.key = webhook_secrets.rotate(alice)  # sessions with a webhook need their owner's
    server.thread.start()
    yield server
    server.server.shutdown()
    server.server.server_close()


def finished_session(make_session: Any, **fields: Any) -> ThinkingSession:
    fields.setdefault("status", Status.COMPLETED)
    fields.setdefault("completion_reason", CompletionReason.BUDGET)
    fields.setdefault("final_answer", "Because of Rayleigh scattering.")
    fields.setdefault("final_confidence", 0.8)
    fields.setdefault("finished_at", timezone.now())
    return make_session(**fields)


# --- mail -----------------------------------------------------------------------------


def test_a_completed_session_mails_its_owner(fake_claude: Any, alice: Any, smtp: Inbox):
    alice.email = "alice@example.org"
    alice.save()

    think("Why is the sky blue?", "--minutes", "0.05", "--owner", "alice", "--notify")

    session = ThinkingSession.objects.get()
    assert session.status == Status.COMPLETED
    [(recipients, message)] = smtp.messages
    assert recipients == ["alice@example.org"]
    assert "Why is the sky blue?" in message["Subject"]
    text = message.get_content()
    assert "Question: Why is the sky blue?" in text
    assert "Outcome: Completed (time budget used)" in text
    assert f"Confidence: {session.final_confidence:.0%}" in text
    assert f"https://think.example.org/sessions/{session.pk}/" in text
    assert Delivery.objects.get().status == DeliveryStatus.DELIVERED


def test_a_failed_session_mails_its_owner_the_reason(fake_claude: Any, alice: Any, smtp: Inbox):
    alice.email = "alice@example.org"
    alice.save()

    def plan_then_a_bad_key(body: dict) -> Reply | HttpError:
        if "WEB QUERIES:" in prompt_of({"body": body}):
            return fake_claude.scripted_mind(body)
        return HttpError(status=401, type="authentication_error")

    fake_claude.responder = plan_then_a_bad_key
    with pytest.raises(SystemExit):
        think("Q?", "--minutes", "1", "--owner", "alice", "--notify")

    [(_, message)] = smtp.messages
    text = message.get_content()
    assert "Outcome: Failed (error)" in text and "What went wrong:" in text
    assert "Confidence: none" in text


def test_no_mail_when_the_session_says_no(fake_claude: Any, alice: Any, smtp: Inbox):
    alice.email = "alice@example.org"
    alice.save()
    think("Q?", "--minutes", "0.05", "--owner", "alice", "--no-notify")
    assert smtp.messages == [] and not Delivery.objects.exists()


def test_mail_defaults_follow_the_budget_and_the_account_setting(
    client: Client, alice: Any, monkeypatch: pytest.MonkeyPatch, settings: Any
):
    settings.DEEPTHINK_MAX_CONCURRENT_SESSIONS = 50
    monkeypatch.setattr("thinking.people.actions.request_start", lambda pk: None)
    monkeypatch.setattr("thinking.people.actions.llm.is_configured", lambda: True)
    client.force_login(alice)

    def start(**data: Any) -> dict:
        response = client.post("/api/sessions", {"question": "Q?", **data},
                               content_type="application/json")  # fmt: skip
        assert response.status_code == 201, response.content
        return response.json()

    assert start(minutes=10)["notify"] is True
    assert start(minutes=5)["notify"] is False
    assert start(minutes=5, notify=True)["notify"] is True
    assert start(minutes=30, notify=False)["notify"] is False

    # The account page sets the default for new sessions.
    page = client.get("/settings/account/").content.decode()
    assert "Mail me when a session ends" in page
    response = client.post("/settings/notifications/",
                           {"mail": MailChoice.ALWAYS, "email": "a@example.org"})  # fmt: skip
    assert response.status_code == 302
    assert NotificationPreference.objects.get(user=alice).mail == MailChoice.ALWAYS
    alice.refresh_from_db()
    assert alice.email == "a@example.org"
    assert start(minutes=1)["notify"] is True
    client.post("/settings/notifications/", {"mail": MailChoice.NEVER, "email": ""})
    assert start(minutes=60)["notify"] is False


# --- webhooks -------------------------------------------------------------------------


def test_a_finished_session_posts_a_correctly_signed_webhook(
    fake_claude: Any, alice: Any, hook: Hook
):
    think("Why is the sky blue?", "--minutes", "0.05", "--owner", "alice",
          "--webhook-url", hook.url("/hooks/deep?x=1"))  # fmt: skip

    session = ThinkingSession.objects.get()
    [request] = hook.received
    body, headers = request["body"], request["headers"]
    # Standard Webhooks, under alice's own key (tests/thinking/test_webhooks.py checks it
    # with the receiver's code from the README).
    message_id, timestamp = headers["webhook-id"], int(headers["webhook-timestamp"])
    signature = webhooks.signature(message_id, timestamp, body, [hook.key])
    assert headers["webhook-signature"] == signature and message_id.startswith("msg_")
    assert request["path"] == "/hooks/deep?x=1"
    assert request["headers"]["Content-Type"] == "application/json"
    summary = json.loads(body)
    assert summary["id"] == str(session.pk) and summary["status"] == "completed"
    assert summary["final_answer"] == session.final_answer
    assert summary["final_confidence"] == session.final_confidence
    assert summary["url"].endswith(f"/sessions/{session.pk}/")
    # A receiver with another key would reject it.
    other = webhook_secrets.new_secret()
    assert webhooks.signature(message_id, timestamp, body, [other]) != signature


async def test_failed_deliveries_are_retried_and_survive_a_worker_restart(
    closed_supervisors: Any,
    alice: Any,
    make_session: Any,
    hook: Hook,
    settings: Any,
    background_tasks: Any,
):
    from channels.db import database_sync_to_async

    session = await database_sync_to_async(finished_session)(make_session, webhook_url=hook.url())
    hook.answers = [(503, {})]
    await database_sync_to_async(notify.notify_finished)(session.pk)

    assert await notify.deliver_due() == 0
    row = await Delivery.objects.aget()
    assert row.status == DeliveryStatus.PENDING and row.attempts == 1
    assert "503" in row.last_error

    # The process that tried is gone; a fresh worker's sweep sends what is still due.
    settings.DEEPTHINK_SWEEP_SECONDS = 0.05
    settings.DEEPTHINK_HEARTBEAT_SECONDS = 0.05
    worker = Supervisor(worker_id="fresh-worker")
    task = asyncio.create_task(worker.run_forever())
    for _ in range(400):  # up to 20 s on a busy machine
        row = await Delivery.objects.aget()
        if row.status != DeliveryStatus.PENDING:
            break
        await asyncio.sleep(0.05)
    task.cancel()
    assert row.status == DeliveryStatus.DELIVERED and row.attempts == 2
    assert len(hook.received) == 2
    assert hook.received[0]["body"] == hook.received[1]["body"], "the same signed body"


async def test_backoff_waits_before_the_next_attempt(
    alice: Any, make_session: Any, hook: Hook, settings: Any, background_tasks: Any
):
    from channels.db import database_sync_to_async

    settings.DEEPTHINK_WEBHOOK_BACKOFF_SECONDS = 60
    session = await database_sync_to_async(finished_session)(make_session, webhook_url=hook.url())
    hook.answers = [(500, {}), (500, {})]
    await database_sync_to_async(notify.notify_finished)(session.pk)
    await notify.deliver_due()
    row = await Delivery.objects.aget()
    assert row.next_at > timezone.now() + timedelta(seconds=50)
    await notify.deliver_due()  # not due yet: nothing is sent
    assert len(hook.received) == 1


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://169.254.169.254/latest/meta-data/", "169.254.169.254"),
        ("http://10.1.2.3/hook", "10.1.2.3"),
        ("http://127.0.0.1:9/hook", "127.0.0.1"),
        ("http://[::1]:9/hook", "::1"),
        ("http://localhost:9/hook", "resolves to"),
        ("ftp://example.org/hook", "http:// or https://"),
        ("http://user:pw@example.org/hook", "user name or password"),
    ],
)
def test_private_and_odd_webhook_urls_are_refused_at_submit(
    client: Client, alice: Any, settings: Any, monkeypatch: pytest.MonkeyPatch,
    url: str, reason: str,
):  # fmt: skip
    monkeypatch.setattr("thinking.people.actions.llm.is_configured", lambda: True)
    settings.DEEPTHINK_WEBHOOK_ALLOWED_HOSTS = []  # any public host; nothing private listed
    client.force_login(alice)
    response = client.post("/api/sessions", {"question": "Q?", "minutes": 1, "webhook_url": url},
                           content_type="application/json")  # fmt: skip
    assert response.status_code == 422
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", "payload", "webhook_url"] and reason in error["msg"]
    assert not ThinkingSession.objects.exists()


def test_hosts_are_limited_to_the_allowed_list(settings: Any):
    settings.DEEPTHINK_WEBHOOK_ALLOWED_HOSTS = ["hooks.example.org", "127.0.0.1"]
    assert "not among the allowed" in webhooks.refusal("https://evil.example.net/x")
    # Listing a name is not enough when it resolves to loopback: the address must be listed.
    settings.DEEPTHINK_WEBHOOK_ALLOWED_HOSTS = ["localhost"]
    assert "127.0.0.1" in webhooks.refusal("http://localhost:8/x") or "::1" in (
        webhooks.refusal("http://localhost:8/x")
    )
    settings.DEEPTHINK_WEBHOOKS = False
    assert "Webhooks are off here" in webhooks.refusal("https://hooks.example.org/x")


@pytest.mark.parametrize(
    "location", ["http://10.0.0.7/steal", "http://169.254.169.254/latest/", "http://[::1]:1/"]
)
async def test_a_redirect_to_a_private_address_is_refused(hook: Hook, location: str):
    hook.answers = [(302, {"Location": location})]
    outcome = await webhooks.post(hook.url(), b'{"a":1}')
    assert not outcome.delivered and outcome.permanent
    assert (urlsplit(location).hostname or "") in outcome.error
    assert len(hook.received) == 1, "the redirect was not followed"


async def test_a_redirect_is_checked_after_resolving_its_address(hook: Hook, settings: Any):
    # "2130706434" is a name to the allowed list but resolves to 127.0.0.2 (a classic way
    # around string checks); that address is not listed, so the redirect is refused.
    settings.DEEPTHINK_WEBHOOK_ALLOWED_HOSTS = ["127.0.0.1", "2130706434"]
    hook.answers = [(302, {"Location": f"http://2130706434:{hook.port}/x"})]
    outcome = await webhooks.post(hook.url(), b"{}")
    assert not outcome.delivered and outcome.permanent
    assert "resolves to 127.0.0.2" in outcome.error
    assert len(hook.received) == 1


async def test_an_allowed_redirect_is_followed_and_checked_again(hook: Hook):
    hook.answers = [(307, {"Location": "/moved"})]
    outcome = await webhooks.post(hook.url("/first"), b'{"a":1}')
    assert outcome.delivered
    assert [r["path"] for r in hook.received] == ["/first", "/moved"]
    assert hook.received[1]["body"] == b'{"a":1}'


async def test_the_request_goes_to_the_checked_address_under_the_hosts_name(
    hook: Hook, settings: Any
):
    settings.DEEPTHINK_WEBHOOK_ALLOWED_HOSTS = ["localhost", "127.0.0.1", "::1"]
    outcome = await webhooks.post(hook.url(host="localhost"), b"{}")
    assert outcome.delivered
    assert hook.received[0]["headers"]["Host"] == f"localhost:{hook.port}"


@pytest.mark.parametrize(
    ("host", "carried"),
    [
        ("[::ffff:127.0.0.1]", "127.0.0.1"),  # IPv4-mapped
        ("[::ffff:7f00:1]", "127.0.0.1"),  # the same, in hex
        ("[::ffff:0:7f00:1]", "127.0.0.1"),  # IPv4-translated
        ("[::127.0.0.1]", "127.0.0.1"),  # IPv4-compatible
        ("[::a9fe:a9fe]", "169.254.169.254"),
        ("[64:ff9b::7f00:1]", "127.0.0.1"),  # NAT64, well-known prefix
        ("[64:ff9b::10.1.2.3]", "10.1.2.3"),
        ("[2002:7f00:1::1]", "127.0.0.1"),  # 6to4
    ],
)
def test_ipv6_forms_of_private_ipv4_addresses_are_refused(settings: Any, host: str, carried: str):
    settings.DEEPTHINK_WEBHOOK_ALLOWED_HOSTS = []
    reason = webhooks.refusal(f"http://{host}:8080/hook")
    assert f"(the IPv4 address {carried})" in reason


def test_local_use_nat64_is_refused_and_public_ipv4_behind_ipv6_forms_passes(settings: Any):
    settings.DEEPTHINK_WEBHOOK_ALLOWED_HOSTS = []
    assert "64:ff9b:1::a00:1" in webhooks.refusal("http://[64:ff9b:1::a00:1]/hook")
    for host in ("[64:ff9b::808:808]", "[::ffff:8.8.8.8]", "[2606:4700::1111]"):
        assert webhooks.refusal(f"http://{host}/hook") == "", host
