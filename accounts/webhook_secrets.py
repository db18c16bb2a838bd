"""Each person's webhook signing key: made or rotated on the account page (or with
`manage.py webhook_secret`), shown once, then only as a hint; read when a delivery is signed
(thinking.people.webhooks, thinking.people.notify).

One key per person, not one for the site: a receiver given a key to check its own webhooks
cannot forge anyone else's.
"""

from __future__ import annotations

import base64
import secrets
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from .models import WebhookSecret

PREFIX = "whsec_"
KEY_BYTES = 32
# After a rotation, deliveries are signed with the previous key too, this long.
ROTATION_OVERLAP = timedelta(days=1)


def new_secret() -> str:
    return PREFIX + base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode()


def rotate(user: Any) -> str:
    """A new signing key for this person (their first, or in place of the one they had);
    returns it, to be shown this once."""
    secret = new_secret()
    with transaction.atomic():
        row = WebhookSecret.objects.select_for_update().filter(user=user).first()
        if row is None:
            WebhookSecret.objects.create(user=user, secret=secret, created_at=timezone.now())
        else:
            row.previous, row.secret, row.created_at = row.secret, secret, timezone.now()
            row.save(update_fields=["previous", "secret", "created_at"])
    return secret


def of(user: Any) -> WebhookSecret | None:
    return WebhookSecret.objects.filter(user=user).first()


def signing_secrets(user_ids: set[int]) -> dict[int, tuple[str, ...]]:
    """The keys each person's deliveries are signed with now: the current one, and the one
    before it for a day after a rotation. A person without a key is absent."""
    overlap_from = timezone.now() - ROTATION_OVERLAP
    found: dict[int, tuple[str, ...]] = {}
    rows = WebhookSecret.objects.filter(user_id__in=user_ids)
    for user_id, secret, previous, created_at in rows.values_list(
        "user_id", "secret", "previous", "created_at"
    ):
        keep_previous = previous and created_at > overlap_from
        found[user_id] = (secret, previous) if keep_previous else (secret,)
    return found
