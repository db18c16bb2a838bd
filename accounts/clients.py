"""The client's address, trusting `X-Forwarded-For` only as far as the operator says.

With `DEEPTHINK_TRUSTED_PROXY_COUNT = 0` (the default) the header is ignored: anyone can send
it, so believing it would let a client pick the address it is throttled and logged under.
With N trusted proxies in front, each appends the address it received the request from, so
the Nth entry from the right is the address the outermost trusted proxy saw; anything to its
left was written by the client and is ignored.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse


def client_address(meta: dict[str, object], trusted_proxies: int | None = None) -> str:
    """The client's address from a request's META (or an ASGI scope turned into one)."""
    remote = str(meta.get("REMOTE_ADDR") or "")
    count = settings.DEEPTHINK_TRUSTED_PROXY_COUNT if trusted_proxies is None else trusted_proxies
    if count <= 0:
        return remote
    hops = [part.strip() for part in str(meta.get("HTTP_X_FORWARDED_FOR") or "").split(",")]
    hops = [hop for hop in hops if hop]
    if len(hops) < count:
        # Fewer hops than proxies: the request did not come through all of them.
        return remote
    candidate = hops[-count]
    try:
        return str(ipaddress.ip_address(candidate))
    except ValueError:
        return remote


class TrustedProxyMiddleware:
    """Puts the real client address in REMOTE_ADDR, so throttling, logs and everything else
    that reads it agree. Does nothing unless DEEPTHINK_TRUSTED_PROXY_COUNT is set."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if settings.DEEPTHINK_TRUSTED_PROXY_COUNT > 0:
            request.META["REMOTE_ADDR"] = client_address(request.META) or "unknown"
        return self.get_response(request)
