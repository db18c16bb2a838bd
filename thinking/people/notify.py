"""Hearing when a session ends (#19): a mail to its owner and a signed webhook POST.

`notify_finished` runs once the row saying a session completed or failed is committed. It
only stores what to send (Delivery rows); `start_delivery`, called from every worker's
sweep, sends them, each in a task of its own, and retries with backoff, so nothing is lost
when a worker restarts and no receiver holds up another. A failed attempt is counted with
its reason; after DEEPTHINK_WEBHOOK_MAX_ATTEMPTS the delivery is given up, the reason kept.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import uuid
import weakref
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from django.conf import settings
from django.core.mail import send_mail
from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from django.utils import timezone

from accounts import webhook_secrets
from accounts.models import MailChoice, NotificationPreference
from thinking.models import Delivery, DeliveryStatus, Status, ThinkingSession
from thinking.people import webhooks

logger = logging.getLogger(__name__)

LONG_SESSION_MINUTES = 10
ENDED = (Status.COMPLETED, Status.FAILED)


def mail_default(user: Any, minutes: float) -> bool:
    """Whether a session of this length mails its owner when they did not say."""
    pref = NotificationPreference.objects.filter(user=user).values_list("mail", flat=True)
    choice = pref.first() or MailChoice.LONG
    if choice == MailChoice.ALWAYS:
        return True
    if choice == MailChoice.NEVER:
        return False
    return minutes >= LONG_SESSION_MINUTES


def absolute_url(path: str) -> str:
    return settings.DEEPTHINK_BASE_URL.rstrip("/") + path


def summary(session: ThinkingSession) -> dict[str, Any]:
    """What a webhook receives: enough to act on without another request."""
    return {
        "event": "session.finished",
        "id": str(session.pk),
        "url": absolute_url(session.get_absolute_url()),
        "question": session.question,
        "status": session.status,
        "completion_reason": session.completion_reason or None,
        "final_answer": session.final_answer or None,
        "final_confidence": session.final_confidence,
        "error": session.error_message or None,
        "parent": str(session.parent_id) if session.parent_id else None,
        "created_at": session.created_at,
        "finished_at": session.finished_at,
    }


def mail_text(session: ThinkingSession) -> tuple[str, str]:
    outcome = session.get_status_display()
    if session.completion_reason:
        outcome += f" ({session.get_completion_reason_display().lower()})"
    confidence = (
        f"{session.final_confidence:.0%}" if session.final_confidence is not None else "none"
    )
    lines = [
        f"Question: {session.question}",
        f"Outcome: {outcome}",
        f"Confidence: {confidence}",
        "",
    ]
    if session.status == Status.FAILED and session.error_message:
        lines += [f"What went wrong: {session.error_message}", ""]
    elif session.final_answer:
        lines += ["Answer:", session.final_answer[:3000], ""]
    lines.append(f"See it all: {absolute_url(session.get_absolute_url())}")
    subject = f"Deep Think {outcome.lower()}: {session.question}"
    return " ".join(subject.split())[:200], "\n".join(lines)


def notify_finished(session_id: uuid.UUID | str) -> list[Delivery]:
    """Store the mail and the webhook call for a session that just completed or failed."""
    session = ThinkingSession.objects.select_related("owner").filter(pk=session_id).first()
    if session is None or session.status not in ENDED:
        return []
    rows = []
    email = getattr(session.owner, "email", "")
    if session.notify_email and email:
        subject, text = mail_text(session)
        rows.append(
            Delivery(session=session, kind="mail", target=email, subject=subject, body=text)
        )
    if session.webhook_url:
        body = json.dumps(summary(session), cls=DjangoJSONEncoder, separators=(",", ":"))
        rows.append(
            Delivery(session=session, kind="webhook", target=session.webhook_url, body=body)
        )
    return Delivery.objects.bulk_create(rows)


def schedule(session_id: uuid.UUID | str) -> None:
    """Call from where a session's final status is written, inside its transaction."""
    transaction.on_commit(lambda: notify_finished(session_id))


# --- sending ---------------------------------------------------------------------------

CLAIM_MARGIN_SECONDS = 60  # a claim outlives a delivery's deadline by this much


@dataclass(frozen=True)
class Claimed:
    """A delivery this worker is sending, with the keys its webhook is signed with (none for
    a mail, or for an owner without a key)."""

    row: Delivery
    secrets: tuple[str, ...] = ()


def _claim_due(limit: int = 20, session_id: uuid.UUID | None = None) -> list[Claimed]:
    """Due deliveries (of one session when given), each claimed by one conditional update so
    two workers never send the same one at once; a claim lasts past the delivery's deadline,
    then a sender that died is replaced."""
    now = timezone.now()
    rows = Delivery.objects.filter(status=DeliveryStatus.PENDING, next_at__lte=now)
    if session_id is not None:
        rows = rows.filter(session_id=session_id)
    due = list(rows.order_by("next_at")[:limit])
    claim = settings.DEEPTHINK_WEBHOOK_TIMEOUT_SECONDS + CLAIM_MARGIN_SECONDS
    claimed = []
    for row in due:
        later = now + timedelta(seconds=claim)
        if Delivery.objects.filter(pk=row.pk, next_at=row.next_at).update(next_at=later):
            claimed.append(row)
    owners = dict(
        ThinkingSession.objects.filter(pk__in={row.session_id for row in claimed}).values_list(
            "pk", "owner_id"
        )
    )
    keys = webhook_secrets.signing_secrets(set(owners.values()))
    return [Claimed(row, keys.get(owners.get(row.session_id, -1), ())) for row in claimed]


def _send_mail(row: Delivery) -> webhooks.Outcome:
    try:
        send_mail(row.subject, row.body, None, [row.target])
    except Exception as error:  # SMTP errors, refused connections, ...
        return webhooks.Outcome(False, f"{type(error).__name__}: {error}"[:500])
    return webhooks.Outcome(True)


async def _send_webhook(claimed: Claimed) -> webhooks.Outcome:
    row = claimed.row
    if not claimed.secrets:
        return webhooks.Outcome(False, webhooks.NEEDS_KEY, permanent=True)
    body = row.body.encode()
    # The same id on every attempt, a fresh timestamp (and signature) on each.
    headers = webhooks.signed_headers(f"msg_{row.message_id.hex}", body, claimed.secrets)
    return await webhooks.post(row.target, body, headers=headers)


def _record(row: Delivery, outcome: webhooks.Outcome) -> None:
    attempts = row.attempts + 1
    changes: dict[str, Any] = {"attempts": attempts, "last_error": outcome.error}
    if outcome.delivered:
        changes.update(status=DeliveryStatus.DELIVERED, delivered_at=timezone.now())
    elif outcome.permanent or attempts >= settings.DEEPTHINK_WEBHOOK_MAX_ATTEMPTS:
        changes["status"] = DeliveryStatus.FAILED
        if not outcome.permanent:
            tries = f"{attempts} attempt" + ("s" if attempts > 1 else "")
            changes["last_error"] = f"Gave up after {tries}. {outcome.error}"
        logger.warning(
            "Giving up on %s for session %s: %s", row.kind, row.session_id, outcome.error
        )
    else:
        backoff = settings.DEEPTHINK_WEBHOOK_BACKOFF_SECONDS * 2 ** (attempts - 1)
        changes["next_at"] = timezone.now() + timedelta(seconds=min(backoff, 3600))
    Delivery.objects.filter(pk=row.pk).update(**changes)


# Recording an outcome is tried this many times, a moment apart, before the claim is left to
# run out (and the delivery to be sent again).
RECORD_TRIES = 4
RECORD_PAUSE_SECONDS = 0.25

# Off the thread the sessions' database calls share, so sending never queues behind them.
_db = functools.partial(database_sync_to_async, thread_sensitive=False)


async def deliver(claimed: Claimed) -> bool:
    """Send one claimed delivery and record the outcome: delivered, retried later with
    backoff, or given up with the reason. Whatever goes wrong while sending (a refused
    connection, a reply that cannot be read, even running out of memory) is an attempt
    counted with its reason, never a delivery left pending untried. Never raises."""
    row = claimed.row
    try:
        if row.kind == "mail":
            outcome = await sync_to_async(_send_mail, thread_sensitive=False)(row)
        else:
            outcome = await _send_webhook(claimed)
    except Exception as error:
        logger.exception("Delivery %s failed unexpectedly", row.pk)
        outcome = webhooks.Outcome(False, f"{type(error).__name__}: {error}"[:500])
    for attempt in range(1, RECORD_TRIES + 1):
        try:
            await _db(_record)(row, outcome)  # one UPDATE of values worked out here: idempotent
            break
        except Exception:
            if attempt == RECORD_TRIES:
                # Not recorded: the claim runs out and the delivery is tried again (sent twice
                # if it was delivered: the receiver sees the same webhook id).
                logger.exception("Could not record delivery %s", row.pk)
            else:
                # A database busy for a moment (a lock, a dropped connection): a webhook sent
                # is not to be sent again for that.
                await asyncio.sleep(RECORD_PAUSE_SECONDS * attempt)
    return outcome.delivered


class Outbox:
    """One event loop's deliveries in flight: a task each, at most
    DEEPTHINK_WEBHOOK_PARALLEL at once, so a slow receiver holds up only its own delivery.
    Only as many are claimed as there is room for: a claimed delivery never waits its turn
    while its claim runs out."""

    def __init__(self) -> None:
        self.sending: set[asyncio.Task[bool]] = set()
        self.filling: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.filling is None:
            self.filling = asyncio.create_task(self._fill(), name="deepthink-deliveries")
            self.filling.add_done_callback(self._filled)

    def _filled(self, task: asyncio.Task[None]) -> None:
        self.filling = None  # and nothing here keeps the event loop alive once all is sent

    async def _fill(self) -> None:
        room = settings.DEEPTHINK_WEBHOOK_PARALLEL - len(self.sending)
        if room <= 0:
            return
        try:
            due = await _db(_claim_due)(limit=room)
        except Exception:
            logger.exception("Could not read pending deliveries")
            return
        for claimed in due:
            task = asyncio.create_task(
                deliver(claimed), name=f"deepthink-delivery-{claimed.row.pk}"
            )
            self.sending.add(task)
            task.add_done_callback(self.sending.discard)


_outboxes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Outbox] = (
    weakref.WeakKeyDictionary()
)


def start_delivery() -> None:
    """Start sending what is due, each delivery in a task of its own, so a slow webhook
    never delays the worker's heartbeats and sweeps, nor any other delivery."""
    loop = asyncio.get_running_loop()
    outbox = _outboxes.get(loop)
    if outbox is None:
        outbox = _outboxes[loop] = Outbox()
    outbox.start()


async def deliver_due(session_id: uuid.UUID | None = None) -> int:
    """Send what is due now (only `session_id`'s when given), all at once, and wait for
    them; returns how many were delivered. Never raises."""
    try:
        due = await _db(_claim_due)(
            limit=settings.DEEPTHINK_WEBHOOK_PARALLEL, session_id=session_id
        )
    except Exception:
        logger.exception("Could not read pending deliveries")
        return 0
    return sum(await asyncio.gather(*(deliver(claimed) for claimed in due)))
