"""Hearing when a session ends (#19): a mail to its owner and a signed webhook POST.

`notify_finished` runs once the row saying a session completed or failed is committed. It
only stores what to send (Delivery rows); `deliver_due`, called from every worker's sweep,
sends them and retries with backoff, so nothing is lost when a worker restarts.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import uuid
import weakref
from datetime import timedelta
from typing import Any

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from django.conf import settings
from django.core.mail import send_mail
from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from django.utils import timezone

from accounts.models import MailChoice, NotificationPreference

from . import webhooks
from .models import Delivery, DeliveryStatus, Status, ThinkingSession

logger = logging.getLogger(__name__)

LONG_SESSION_MINUTES = 10
ENDED = (Status.COMPLETED, Status.FAILED)
CLAIM_SECONDS = 120  # a claimed delivery is retried after this if its sender died


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


def _claim_due(limit: int = 20, session_id: uuid.UUID | None = None) -> list[Delivery]:
    """Due deliveries (of one session when given), each claimed by one conditional update so
    two workers never send the same one at once."""
    now = timezone.now()
    rows = Delivery.objects.filter(status=DeliveryStatus.PENDING, next_at__lte=now)
    if session_id is not None:
        rows = rows.filter(session_id=session_id)
    due = list(rows.order_by("next_at")[:limit])
    claimed = []
    for row in due:
        later = now + timedelta(seconds=CLAIM_SECONDS)
        if Delivery.objects.filter(pk=row.pk, next_at=row.next_at).update(next_at=later):
            claimed.append(row)
    return claimed


def _send_mail(row: Delivery) -> webhooks.Outcome:
    try:
        send_mail(row.subject, row.body, None, [row.target])
    except Exception as error:  # SMTP errors, refused connections, ...
        return webhooks.Outcome(False, f"{type(error).__name__}: {error}"[:500])
    return webhooks.Outcome(True)


def _record(row: Delivery, outcome: webhooks.Outcome) -> None:
    attempts = row.attempts + 1
    changes: dict[str, Any] = {"attempts": attempts, "last_error": outcome.error}
    if outcome.delivered:
        changes.update(status=DeliveryStatus.DELIVERED, delivered_at=timezone.now())
    elif outcome.permanent or attempts >= settings.DEEPTHINK_WEBHOOK_MAX_ATTEMPTS:
        changes["status"] = DeliveryStatus.FAILED
        logger.warning(
            "Giving up on %s for session %s: %s", row.kind, row.session_id, outcome.error
        )
    else:
        backoff = settings.DEEPTHINK_WEBHOOK_BACKOFF_SECONDS * 2 ** (attempts - 1)
        changes["next_at"] = timezone.now() + timedelta(seconds=min(backoff, 3600))
    Delivery.objects.filter(pk=row.pk).update(**changes)


_running: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Task[int]] = (
    weakref.WeakKeyDictionary()
)


def start_delivery() -> None:
    """Send what is due in a task of its own (one per event loop at a time), so a slow
    webhook never delays the worker's heartbeats and sweeps."""
    loop = asyncio.get_running_loop()
    task = _running.get(loop)
    if task is None or task.done():
        _running[loop] = loop.create_task(deliver_due(), name="deepthink-deliveries")


# Off the thread the sessions' database calls share, so sending never queues behind them.
_db = functools.partial(database_sync_to_async, thread_sensitive=False)


async def deliver_due(session_id: uuid.UUID | None = None) -> int:
    """Send what is due (only `session_id`'s when given); returns how many were delivered.
    Never raises."""
    delivered = 0
    try:
        rows = await _db(_claim_due)(session_id=session_id)
    except Exception:
        logger.exception("Could not read pending deliveries")
        return 0
    for row in rows:
        try:
            if row.kind == "mail":
                outcome = await sync_to_async(_send_mail, thread_sensitive=False)(row)
            else:
                outcome = await webhooks.post(row.target, row.body.encode())
            await _db(_record)(row, outcome)
            delivered += outcome.delivered
        except Exception:
            logger.exception("Delivery %s failed unexpectedly", row.pk)
    return delivered
