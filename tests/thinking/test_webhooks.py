"""Webhooks a receiver can trust, delivered without harm (issue 73): each person's own key
(shown once, rotatable), Standard Webhooks headers checked with the README's receiver code,
replies read a few KB at most and never decompressed, a total deadline per delivery, one slow
receiver delaying nobody else, failures counted and given up with the reason, and requests
going to the address the check approved (DNS rebinding)."""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import textwrap
import threading
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from datetime import timedelta
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from io import StringIO
from pathlib import Path
from typing import Any

import httpx
import pytest
import time_machine
from channels.db import database_sync_to_async
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from accounts import webhook_secrets
from accounts.models import WebhookSecret
from thinking.models import CompletionReason, Delivery, DeliveryStatus, Status, ThinkingSession
from thinking.people import notify, webhooks

pytestmark = pytest.mark.django_db(transaction=True)

README = Path(__file__).resolve().parents[2] / "README.md"
MB = 1024 * 1024


def readme_verify() -> Callable[..., bool]:
    """The receiver's `verify` exactly as the README shows it."""
    text = README.read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    [code] = [textwrap.dedent(block) for block in blocks if "def verify(" in block]
    namespace: dict[str, Any] = {}
    exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 (our own README)
    return namespace["verify"]


# --- a receiver whose every reply a test scripts ---------------------------------------------


class Receiver:
    """A real HTTP server on `host`; `respond(handler)` writes each reply (default: 204)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.received: list[dict[str, Any]] = []
        self.respond: Callable[[BaseHTTPRequestHandler], None] = self.no_content
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.received.append({"path": self.path, "headers": self.headers, "body": body})
                # The sender may stop reading and hang up: as it should.
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    receiver.respond(self)
                self.close_connection = True

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @staticmethod
    def no_content(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(204)
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    def url(self, path: str = "/hook", host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver(settings: Any) -> Iterator[Receiver]:
    settings.DEEPTHINK_WEBHOOK_ALLOWED_HOSTS = ["127.0.0.1"]  # loopback, listed explicitly
    settings.DEEPTHINK_WEBHOOK_BACKOFF_SECONDS = 0
    server = Receiver()
    yield server
    server.stop()


def finished(owner: Any, url: str) -> ThinkingSession:
    return ThinkingSession.objects.create(
        owner=owner, question="Why is the sky blue?", budget_seconds=60, model_id="claude-test",
        synthesis_interval_seconds=15,
        status=Status.COMPLETED, completion_reason=CompletionReason.BUDGET,
        final_answer="Rayleigh scattering.", final_confidence=0.8, finished_at=timezone.now(),
        webhook_url=url,
    )  # fmt: skip


def ended_with_webhook(owner: Any, url: str) -> Delivery:
    """A finished session of `owner`'s with its webhook delivery stored, due now."""
    session = finished(owner, url)
    [row] = [row for row in notify.notify_finished(session.pk) if row.kind == "webhook"]
    return row


# --- the key: each person's own, shown once, rotatable ----------------------------------------


def test_a_signing_key_is_shown_once_then_only_its_hint(client: Client, alice: Any):
    client.force_login(alice)
    page = client.get("/settings/account/").text
    assert "You have no signing key yet" in page

    made = client.post("/settings/webhook-key/")
    assert made.status_code == 200 and "no-store" in made["Cache-Control"]
    key = WebhookSecret.objects.get(user=alice).secret
    assert key.startswith("whsec_") and key in made.text
    assert "shown only this once" in made.text

    later = client.get("/settings/account/").text
    assert key not in later and f"whsec_…{key[-4:]}" in later

    rotated = client.post("/settings/webhook-key/")
    new_key = WebhookSecret.objects.get(user=alice).secret
    assert new_key != key and new_key in rotated.text and key not in rotated.text
    assert "previous key too for a day" in rotated.text


def test_a_webhook_url_needs_its_owners_key(client: Client, alice: Any, settings: Any,
                                             monkeypatch: pytest.MonkeyPatch):  # fmt: skip
    monkeypatch.setattr("thinking.people.actions.llm.is_configured", lambda: True)
    settings.DEEPTHINK_WEBHOOK_ALLOWED_HOSTS = []
    client.force_login(alice)

    def start() -> Any:
        return client.post("/api/sessions", {"question": "Q?", "minutes": 1,
                           "webhook_url": "https://8.8.8.8/hook"},
                           content_type="application/json")  # fmt: skip

    refused = start()
    assert refused.status_code == 422
    assert "Make your webhook signing key" in refused.json()["detail"][0]["msg"]
    webhook_secrets.rotate(alice)
    assert start().status_code == 201


def test_the_terminal_makes_a_key_and_prints_only_it(alice: Any):
    out = StringIO()
    call_command("webhook_key", "alice", stdout=out)
    assert out.getvalue().strip() == WebhookSecret.objects.get(user=alice).secret
    with pytest.raises(CommandError, match="There is no user 'nobody'"):
        call_command("webhook_key", "nobody", stdout=StringIO())


def test_one_persons_key_does_not_sign_anothers_webhooks(alice: Any, bob: Any):
    webhook_secrets.rotate(alice)
    webhook_secrets.rotate(bob)
    keys = webhook_secrets.signing_secrets({alice.pk, bob.pk})
    assert keys[alice.pk] != keys[bob.pk] and len(keys[alice.pk]) == 1


# --- deliveries as a receiver sees them --------------------------------------------------------


async def test_a_delivery_verifies_with_the_readme_receiver_code(alice: Any, receiver: Receiver):
    verify = readme_verify()
    key = await database_sync_to_async(webhook_secrets.rotate)(alice)
    row = await database_sync_to_async(ended_with_webhook)(alice, receiver.url())

    assert await notify.deliver_due() == 1
    [request] = receiver.received
    headers: Message = request["headers"]
    assert headers["webhook-id"] == f"msg_{row.message_id.hex}"
    assert abs(int(headers["webhook-timestamp"]) - time.time()) < 60
    assert verify(key, headers, request["body"])
    # Another person's key, a changed body, an old delivery replayed: all refused.
    assert not verify(webhook_secrets.new_secret(), headers, request["body"])
    assert not verify(key, headers, request["body"].replace(b"Rayleigh", b"Mie"))
    with time_machine.travel(timezone.now() + timedelta(minutes=10)):
        assert not verify(key, headers, request["body"])


async def test_a_retry_keeps_its_id_and_is_signed_afresh(alice: Any, receiver: Receiver):
    verify = readme_verify()
    key = await database_sync_to_async(webhook_secrets.rotate)(alice)
    await database_sync_to_async(ended_with_webhook)(alice, receiver.url())
    answers = [503, 204]

    def respond(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(answers.pop(0))
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    receiver.respond = respond
    assert await notify.deliver_due() == 0
    with time_machine.travel(timezone.now() + timedelta(minutes=7)):
        assert await notify.deliver_due() == 1
        first, retry = (r["headers"] for r in receiver.received)
        assert retry["webhook-id"] == first["webhook-id"]
        assert int(retry["webhook-timestamp"]) >= int(first["webhook-timestamp"]) + 7 * 60
        assert verify(key, retry, receiver.received[1]["body"])
        assert not verify(key, first, receiver.received[0]["body"]), "the first is stale now"


async def test_after_a_rotation_deliveries_carry_both_keys_signatures_for_a_day(
    alice: Any, receiver: Receiver
):
    verify = readme_verify()
    old = await database_sync_to_async(webhook_secrets.rotate)(alice)
    new = await database_sync_to_async(webhook_secrets.rotate)(alice)
    await database_sync_to_async(ended_with_webhook)(alice, receiver.url())
    await notify.deliver_due()
    [today] = receiver.received
    assert len(today["headers"]["webhook-signature"].split()) == 2
    assert verify(old, today["headers"], today["body"])
    assert verify(new, today["headers"], today["body"])
    with time_machine.travel(timezone.now() + timedelta(days=1, minutes=1)):
        await database_sync_to_async(ended_with_webhook)(alice, receiver.url())
        await notify.deliver_due()
        tomorrow = receiver.received[1]
        assert verify(new, tomorrow["headers"], tomorrow["body"])
        assert not verify(old, tomorrow["headers"], tomorrow["body"])


async def test_a_delivery_whose_owner_has_no_key_fails_with_the_reason(
    alice: Any, receiver: Receiver
):
    await database_sync_to_async(webhook_secrets.rotate)(alice)
    row = await database_sync_to_async(ended_with_webhook)(alice, receiver.url())
    await WebhookSecret.objects.filter(user=alice).adelete()  # an admin deleted it
    assert await notify.deliver_due() == 0
    row = await Delivery.objects.aget(pk=row.pk)
    assert row.status == DeliveryStatus.FAILED and "Make your webhook signing key" in row.last_error
    assert receiver.received == [], "nothing unsigned is sent"


# --- without harm ---------------------------------------------------------------------------


def huge_reply(status: int, chunks: int, chunk: bytes, **headers: str) -> Any:
    def respond(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(status)
        handler.send_header("Content-Length", str(chunks * len(chunk)))
        for name, value in headers.items():
            handler.send_header(name.replace("_", "-"), value)
        handler.end_headers()
        for _ in range(chunks):
            handler.wfile.write(chunk)

    return respond


def gzip_bomb(size: int) -> bytes:
    """`size` bytes of zeros as one gzip stream (about a thousandth of it), made a MB at a
    time: the whole never exists uncompressed."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: the gzip format
    zeros = bytes(MB)
    return b"".join(packer.compress(zeros) for _ in range(size // MB)) + packer.flush()


async def peak_while_delivering(alice: Any, url: str) -> tuple[int, Delivery]:
    row = await database_sync_to_async(ended_with_webhook)(alice, url)
    tracemalloc.start()
    try:
        await notify.deliver_due()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, await Delivery.objects.aget(pk=row.pk)


async def test_huge_and_compressed_replies_never_reach_memory(
    alice: Any, receiver: Receiver, settings: Any
):
    """A 100 MB reply and a gzip bomb (100 MB from ~100 KB): the worker reads a few KB of
    each, raw, and marks the delivery failed with the reason."""
    settings.DEEPTHINK_WEBHOOK_MAX_ATTEMPTS = 1
    await database_sync_to_async(webhook_secrets.rotate)(alice)
    small, _ = await peak_while_delivering(alice, receiver.url())

    receiver.respond = huge_reply(500, 100 * 16, b"x" * (MB // 16))
    big, row = await peak_while_delivering(alice, receiver.url())
    assert big < small + 2 * MB, f"{big / MB:.1f} MB at the peak"
    assert row.status == DeliveryStatus.FAILED and row.attempts == 1
    assert row.last_error.startswith("Gave up after 1 attempt. The webhook answered 500: xxx")

    bomb = gzip_bomb(100 * MB)
    receiver.respond = huge_reply(500, 1, bomb, Content_Encoding="gzip")
    peak, row = await peak_while_delivering(alice, receiver.url())
    assert peak < small + 2 * MB, f"{peak / MB:.1f} MB at the peak"
    assert row.status == DeliveryStatus.FAILED and "answered 500" in row.last_error
    assert row.last_error.isprintable(), "binary bytes are not stored (PostgreSQL refuses NUL)"
    sent = receiver.received[-1]["headers"]
    assert sent["Accept-Encoding"] == "identity"


def slow_status_line(stop: threading.Event, every: float = 0.2, at_most: float = 20.0) -> Any:
    """The status line a byte every `every` seconds (each within any per-read timeout),
    until the sender hangs up or `stop`; after `at_most` seconds it completes (200)."""

    def respond(handler: BaseHTTPRequestHandler) -> None:
        reply = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
        deadline = time.monotonic() + at_most
        for n in range(len(reply)):
            if stop.is_set():
                return
            handler.wfile.write(reply[n : n + 1])
            handler.wfile.flush()
            if time.monotonic() < deadline:
                time.sleep(every)

    return respond


async def test_a_dripping_receiver_is_cut_off_at_the_deadline(
    alice: Any, receiver: Receiver, settings: Any
):
    settings.DEEPTHINK_WEBHOOK_TIMEOUT_SECONDS = 1.0
    await database_sync_to_async(webhook_secrets.rotate)(alice)
    stop = threading.Event()
    receiver.respond = slow_status_line(stop)
    row = await database_sync_to_async(ended_with_webhook)(alice, receiver.url())
    try:
        assert await notify.deliver_due() == 0
    finally:
        stop.set()
    row = await Delivery.objects.aget(pk=row.pk)
    assert row.status == DeliveryStatus.PENDING and row.attempts == 1
    assert row.last_error == "No complete answer within 1 s."


async def test_a_slow_receiver_delays_no_one_elses_webhook(
    alice: Any, bob: Any, receiver: Receiver, settings: Any
):
    """Alice's receiver holds its reply until Bob's webhook has arrived (at most 20 s): sent
    one after the other, Bob's would wait for Alice's to end, and hers would give up first."""
    settings.DEEPTHINK_WEBHOOK_TIMEOUT_SECONDS = 30.0
    bobs_arrived = threading.Event()
    alice_saw_bobs: list[bool] = []
    for person in (alice, bob):
        await database_sync_to_async(webhook_secrets.rotate)(person)

    def respond(handler: BaseHTTPRequestHandler) -> None:
        if handler.path == "/bob":
            bobs_arrived.set()
            Receiver.no_content(handler)
            return
        handler.wfile.write(b"HTTP/1.1 2")  # and then nothing, until Bob's has arrived
        handler.wfile.flush()
        alice_saw_bobs.append(bobs_arrived.wait(timeout=20))
        handler.wfile.write(b"04 No Content\r\nContent-Length: 0\r\n\r\n")

    receiver.respond = respond
    alices = await database_sync_to_async(ended_with_webhook)(alice, receiver.url("/alice"))
    bobs = await database_sync_to_async(ended_with_webhook)(bob, receiver.url("/bob"))
    assert alices.next_at <= bobs.next_at  # Alice's is claimed first

    assert await notify.deliver_due() == 2
    assert alice_saw_bobs == [True]
    # Sent side by side, either may reach the receiver first.
    assert sorted(r["path"] for r in receiver.received) == ["/alice", "/bob"]


async def test_a_delivery_is_recorded_though_the_database_is_busy_for_a_moment(
    alice: Any, receiver: Receiver, caplog: pytest.LogCaptureFixture
):
    """The outcome's UPDATE meets another connection's transaction on the deliveries for a
    moment: it is tried again, so a webhook delivered is recorded as delivered, not left for
    its claim to run out and be sent a second time."""
    await database_sync_to_async(webhook_secrets.rotate)(alice)
    requested, locked, answered = threading.Event(), threading.Event(), threading.Event()

    def respond(handler: BaseHTTPRequestHandler) -> None:
        requested.set()  # claimed and sent: now the other transaction takes the table
        locked.wait(timeout=10)
        Receiver.no_content(handler)
        answered.set()

    receiver.respond = respond
    row = await database_sync_to_async(ended_with_webhook)(alice, receiver.url())

    def busy() -> None:
        from django.db import connection, transaction

        try:
            requested.wait(timeout=10)
            with transaction.atomic():
                Delivery.objects.filter(pk=row.pk).update(last_error="")  # holds it
                locked.set()
                answered.wait(timeout=10)
                time.sleep(0.4)  # past the sender's first try to record
        finally:
            connection.close()

    holder = threading.Thread(target=busy)
    holder.start()
    try:
        delivered = await notify.deliver_due()
    finally:
        requested.set()
        locked.set()
        holder.join()
    stored = await Delivery.objects.aget(pk=row.pk)
    assert delivered == 1 and len(receiver.received) == 1
    assert stored.status == DeliveryStatus.DELIVERED and stored.attempts == 1
    assert "Could not record" not in caplog.text


async def test_the_worker_sends_each_delivery_in_a_task_of_its_own(
    alice: Any, bob: Any, receiver: Receiver, settings: Any, background_tasks: Any
):
    """The sweep's `start_delivery` returns at once; while Alice's receiver stalls, Bob's
    webhook still goes out, and a later sweep sends what became due meanwhile."""
    settings.DEEPTHINK_WEBHOOK_TIMEOUT_SECONDS = 30.0
    release = threading.Event()
    for person in (alice, bob):
        await database_sync_to_async(webhook_secrets.rotate)(person)

    def respond(handler: BaseHTTPRequestHandler) -> None:
        if handler.path == "/alice":
            release.wait(timeout=20)
        Receiver.no_content(handler)

    receiver.respond = respond
    alices = await database_sync_to_async(ended_with_webhook)(alice, receiver.url("/alice"))
    # Bob's becomes due a moment after Alice's is sent: stored now, so that no write of the
    # test's meets the sweep's (SQLite's in-memory test database refuses, not waits).
    bobs = await database_sync_to_async(ended_with_webhook)(bob, receiver.url("/bob"))
    later = timezone.now() + timedelta(seconds=1)
    await Delivery.objects.filter(pk=bobs.pk).aupdate(next_at=later)
    notify.start_delivery()
    for _ in range(200):
        notify.start_delivery()  # the worker's sweep, again and again
        if (await Delivery.objects.aget(pk=bobs.pk)).status == DeliveryStatus.DELIVERED:
            break
        await asyncio.sleep(0.05)
    assert (await Delivery.objects.aget(pk=bobs.pk)).status == DeliveryStatus.DELIVERED
    assert (await Delivery.objects.aget(pk=alices.pk)).status == DeliveryStatus.PENDING
    release.set()
    for _ in range(200):
        if (await Delivery.objects.aget(pk=alices.pk)).status == DeliveryStatus.DELIVERED:
            break
        await asyncio.sleep(0.05)
    assert (await Delivery.objects.aget(pk=alices.pk)).status == DeliveryStatus.DELIVERED


async def test_failures_are_counted_and_given_up_with_the_reason(
    alice: Any, receiver: Receiver, settings: Any
):
    settings.DEEPTHINK_WEBHOOK_MAX_ATTEMPTS = 3

    def respond(handler: BaseHTTPRequestHandler) -> None:
        body = b"<h1>Service Unavailable</h1>\n<p>try later</p>"
        handler.send_response(503)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    receiver.respond = respond
    await database_sync_to_async(webhook_secrets.rotate)(alice)
    row = await database_sync_to_async(ended_with_webhook)(alice, receiver.url())
    for attempt in (1, 2):
        await notify.deliver_due()
        row = await Delivery.objects.aget(pk=row.pk)
        assert row.status == DeliveryStatus.PENDING and row.attempts == attempt
    await notify.deliver_due()
    row = await Delivery.objects.aget(pk=row.pk)
    assert row.status == DeliveryStatus.FAILED and row.attempts == 3
    assert row.last_error == (
        "Gave up after 3 attempts. The webhook answered 503: "
        "<h1>Service Unavailable</h1> <p>try later</p>"
    )
    await notify.deliver_due()
    assert len(receiver.received) == 3, "given up: not tried again"


async def test_a_refused_connection_is_an_attempt_counted(alice: Any, settings: Any):
    settings.DEEPTHINK_WEBHOOK_ALLOWED_HOSTS = ["127.0.0.1"]
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    await database_sync_to_async(webhook_secrets.rotate)(alice)
    row = await database_sync_to_async(ended_with_webhook)(alice, f"http://127.0.0.1:{port}/")
    await notify.deliver_due()
    row = await Delivery.objects.aget(pk=row.pk)
    assert row.attempts == 1 and row.status == DeliveryStatus.PENDING
    assert "ConnectError" in row.last_error


# --- where the request goes ---------------------------------------------------------------


@pytest.fixture
def rebinding_dns(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """`rebind.test` resolves to 127.0.0.1 (an address listed as allowed) the first time,
    then to 127.0.0.2 (an internal one, not listed): a DNS rebinding attack."""
    lookups: list[str] = []
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else host  # anyio asks with bytes
        if name != "rebind.test":
            return real(host, port, *args, **kwargs)
        address = "127.0.0.1" if not lookups else "127.0.0.2"
        lookups.append(address)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, int(port)))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return lookups


async def test_the_request_goes_to_the_address_the_check_approved(
    rebinding_dns: list[str], settings: Any
):
    settings.DEEPTHINK_WEBHOOK_ALLOWED_HOSTS = ["rebind.test", "127.0.0.1"]
    approved = Receiver("127.0.0.1")
    internal = Receiver("127.0.0.2", port=approved.port)  # same port, the internal address
    try:
        outcome = await webhooks.post(f"http://rebind.test:{approved.port}/hook", b"{}")
    finally:
        approved.stop()
        internal.stop()
    assert outcome.delivered, outcome.error
    assert rebinding_dns == ["127.0.0.1"], "resolved once, by the check"
    assert internal.received == []
    [request] = approved.received
    assert request["headers"]["Host"] == f"rebind.test:{approved.port}"


async def test_whatever_breaks_while_sending_is_an_attempt_counted_with_its_reason(
    alice: Any, receiver: Receiver, settings: Any, monkeypatch: pytest.MonkeyPatch
):
    """The finding: a reply too big for memory left its delivery pending with attempts=0,
    retried every two minutes forever. Any error while sending now counts, and gives up."""
    settings.DEEPTHINK_WEBHOOK_MAX_ATTEMPTS = 2

    async def out_of_memory(*args: Any, **kwargs: Any) -> Any:
        raise MemoryError("reading the reply")

    monkeypatch.setattr(httpx.AsyncClient, "send", out_of_memory)
    await database_sync_to_async(webhook_secrets.rotate)(alice)
    row = await database_sync_to_async(ended_with_webhook)(alice, receiver.url())
    await notify.deliver_due()
    row = await Delivery.objects.aget(pk=row.pk)
    assert row.status == DeliveryStatus.PENDING and row.attempts == 1
    assert row.last_error == "MemoryError: reading the reply"
    await notify.deliver_due()
    row = await Delivery.objects.aget(pk=row.pk)
    assert row.status == DeliveryStatus.FAILED and row.attempts == 2
    assert row.last_error == "Gave up after 2 attempts. MemoryError: reading the reply"
