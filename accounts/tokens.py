"""Personal API tokens: create, verify, revoke. Only a hash of a token is ever stored.

A token is `dt_` followed by 32 random bytes (URL-safe base64). With that much entropy a
single fast hash (SHA-256) is right: there is nothing to brute-force, so a slow password hash
would only cost time on every API request.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta
from typing import Any

from django.db.models import Q
from django.utils import timezone

from .models import ApiToken

TOKEN_PREFIX = "dt_"  # noqa: S105 (a marker, not a secret)
# The visible start of a token, stored to recognise it in lists (never enough to use it).
SHOWN_CHARS = 10
# last_used_at is a hint for people, not an audit log: write it at most this often.
TOUCH_EVERY = timedelta(minutes=1)


def hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


def create_token(user: Any, name: str) -> tuple[ApiToken, str]:
    """A new token for this user: the stored row, and the token itself (shown once)."""
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        user=user, name=name, prefix=raw[:SHOWN_CHARS], hashed=hash_token(raw)
    )
    return token, raw


def verify_token(raw: str) -> Any | None:
    """The user a token belongs to, or None for an unknown or revoked token or an inactive
    user. Records the use (at most once a minute per token)."""
    if not raw.startswith(TOKEN_PREFIX) or len(raw) > 200:
        return None
    # Looking the hash up leaks nothing useful through timing: an attacker controls the
    # token, not its hash, so a near-miss on the hash says nothing about a real token.
    token = (
        ApiToken.objects.select_related("user")
        .filter(hashed=hash_token(raw), revoked_at__isnull=True)
        .first()
    )
    if token is None or not token.user.is_active:
        return None
    touch(token)
    return token.user


def touch(token: ApiToken) -> None:
    now = timezone.now()
    if token.last_used_at is not None and now - token.last_used_at < TOUCH_EVERY:
        return
    # Conditional, so concurrent requests with the same token write once, not once each.
    ApiToken.objects.filter(pk=token.pk).filter(
        Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - TOUCH_EVERY)
    ).update(last_used_at=now)


def revoke_token(token: ApiToken) -> None:
    """Revoke once; revoking again keeps the first time."""
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(
            revoked_at=token.revoked_at
        )
