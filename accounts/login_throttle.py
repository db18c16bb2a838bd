"""One throttle for every form where a password is typed: the site's login and the admin's.

Failed logins are counted per client and username, and (five times as many) per client
alone, in `DEEPTHINK_LOGIN_WINDOW_SECONDS`. The client is the real one (accounts.clients:
`X-Forwarded-For` only through trusted proxies), and an IPv6 client is counted by its /64:
one machine is given a whole /64, so counting each of its addresses apart would give it
2**64 fresh starts. Both login forms share the counts, so failures on one count on the other.

The check is in the form's `clean()`, before the password is looked at: a refused attempt
never reaches `authenticate()`, so even the right password does not get in while refused.
The views answer 429 when the form says it was refused (`was_throttled`).
"""

from __future__ import annotations

import ipaddress
from typing import Any

from django.conf import settings
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.http import HttpRequest

from . import throttle
from .clients import client_address

THROTTLED = "throttled"  # the error code of a refused attempt


def client_key(address: str) -> str:
    """What a client is counted as: an IPv4 address, or an IPv6 address's /64 (an
    IPv4-mapped IPv6 address is the IPv4 address it carries)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address or "unknown"
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network(f"{ip}/64", strict=False))
    return str(ip)


def _keys(request: HttpRequest | None, username: str) -> list[tuple[tuple[str, ...], int]]:
    meta: dict[str, Any] = dict(request.META) if request is not None else {}
    client = client_key(client_address(meta))
    attempts = settings.DEEPTHINK_LOGIN_ATTEMPTS
    return [
        (("login", client, username.strip().lower()[:150]), attempts),
        (("login-ip", client), attempts * 5),
    ]


def refused(request: HttpRequest | None, username: str) -> bool:
    return any(throttle.too_many(*key, limit=limit) for key, limit in _keys(request, username))


def failed(request: HttpRequest | None, username: str) -> None:
    for key, _limit in _keys(request, username):
        throttle.count(*key, window_seconds=settings.DEEPTHINK_LOGIN_WINDOW_SECONDS)


def succeeded(request: HttpRequest | None, username: str) -> None:
    """A good login clears its (client, username) count; the client's own count stays, so
    logging in to one's own account between guesses buys no fresh guesses."""
    key, _limit = _keys(request, username)[0]
    throttle.reset(*key)


def message() -> str:
    minutes = max(1, settings.DEEPTHINK_LOGIN_WINDOW_SECONDS // 60)
    return f"Too many failed logins. Try again in {minutes} minutes."


class ThrottledAuthenticationForm(AuthenticationForm):
    """The site's login form (`/accounts/login/`), and with Django's AdminAuthenticationForm
    after it the admin's (accounts.admin_site): refused while the throttle says so."""

    def clean(self) -> dict[str, Any]:
        username = str(self.cleaned_data.get("username") or "")
        if refused(self.request, username):
            raise ValidationError(message(), code=THROTTLED)
        try:
            cleaned = super().clean()
        except ValidationError:
            failed(self.request, username)
            raise
        if self.get_user() is not None:
            succeeded(self.request, username)
        return cleaned


def was_throttled(form: Any) -> bool:
    """Whether this bound login form was refused by the throttle (answer 429)."""
    return bool(form is not None and form.has_error(NON_FIELD_ERRORS, THROTTLED))
