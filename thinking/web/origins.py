"""WebSocket origin check that includes the port.

Channels' AllowedHostsOriginValidator compares only the Origin's host with ALLOWED_HOSTS, so
a page served from another port of the same host (another app, a dev server) could open a
live page with the user's cookies. A browser always sends both `Origin` and `Host`; the
connection is same-origin only when they name the same host and port.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier

DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def same_origin(origin: str, host: str) -> bool:
    """Whether a page at `origin` is the site answering at `host` (the Host header)."""
    try:
        page = urlsplit(origin)
        served = urlsplit(f"//{host}")
        page_port, served_port = page.port, served.port
    except ValueError:
        return False
    default = DEFAULT_PORTS.get(page.scheme)
    if default is None or not page.hostname or not served.hostname:
        return False
    # The browser leaves out the port exactly when it is the scheme's default.
    return page.hostname == served.hostname and (page_port or default) == (served_port or default)


class SameOriginValidator:
    """Refuses a WebSocket handshake whose Origin is not this Host, port included. Wraps
    Channels' host check (ALLOWED_HOSTS), which still applies."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        origin, host = _header(scope, b"origin"), _header(scope, b"host")
        # Without a Host header the client is no browser (it could forge Origin anyway);
        # the ALLOWED_HOSTS check behind this one still applies.
        if origin is not None and host is not None and not same_origin(origin, host):
            return await WebsocketDenier()(scope, receive, send)
        return await self.application(scope, receive, send)
