"""Webhooks (#19): which URLs may be called, signing, and one delivery attempt.

A webhook URL is checked when it is given and again before every request and every
redirect hop: the host must be allowed (DEEPTHINK_WEBHOOK_ALLOWED_HOSTS, when set) and every
address it resolves to must be public, unless that address is listed explicitly. The request
then goes to the checked address itself (Host header and TLS name set to the host), so a DNS
answer that changes between the check and the connection cannot redirect it.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

import httpx
from asgiref.sync import sync_to_async
from django.conf import settings

SIGNATURE_HEADER = "X-Deepthink-Signature-256"
MAX_REDIRECTS = 3
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class Refused(Exception):
    """The URL may not be called; the message says why."""


def sign(body: bytes, secret: str | None = None) -> str:
    """`sha256=<hex>`: HMAC-SHA256 of the raw body with DEEPTHINK_WEBHOOK_SECRET."""
    key = (settings.DEEPTHINK_WEBHOOK_SECRET if secret is None else secret).encode()
    return "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()


def _allowed() -> list[str]:
    return [h.strip().lower() for h in settings.DEEPTHINK_WEBHOOK_ALLOWED_HOSTS if h.strip()]


def _listed_address(address: Address) -> bool:
    """A non-public address passes only when it (or its network) is listed explicitly."""
    for entry in _allowed():
        try:
            network = ipaddress.ip_network(entry.strip("[]"), strict=False)
        except ValueError:
            continue  # a host name, not an address
        if address.version == network.version and address in network:
            return True
    return False


# IPv6 forms that carry an IPv4 address in their last 32 bits, and reach it: IPv4-mapped
# (::ffff:a.b.c.d), IPv4-translated (::ffff:0:a.b.c.d), IPv4-compatible (::a.b.c.d) and the
# well-known NAT64 prefix (64:ff9b::a.b.c.d, which a NAT64 gateway forwards to a.b.c.d).
_CARRIES_IPV4 = tuple(
    ipaddress.IPv6Network(net)
    for net in ("::ffff:0:0/96", "::ffff:0:0:0/96", "::/96", "64:ff9b::/96")
)
_UNSPECIFIED_OR_LOOPBACK = ipaddress.IPv6Network("::/127")


def carried_ipv4(address: Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for (see _CARRIES_IPV4; also 6to4's
    2002:a.b.c.d::), or None."""
    if isinstance(address, ipaddress.IPv4Address) or address in _UNSPECIFIED_OR_LOOPBACK:
        return None
    if any(address in network for network in _CARRIES_IPV4):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address.sixtofour


def _allowed_address(address: Address) -> bool:
    """Public, or listed. An IPv6 address carrying an IPv4 address is judged as that IPv4
    address, however it is written ([::127.0.0.1], [::ffff:0:7f00:1], [64:ff9b::7f00:1])."""
    if _listed_address(address):
        return True
    inner = carried_ipv4(address)
    if inner is not None:
        return _listed_address(inner) or (inner.is_global and not inner.is_multicast)
    return address.is_global and not address.is_multicast


def _described(address: Address) -> str:
    inner = carried_ipv4(address)
    return f"{address} (the IPv4 address {inner})" if inner is not None else str(address)


@dataclass(frozen=True)
class Target:
    url: str
    host: str
    port: int
    address: str  # the checked address to connect to


def check_syntax(url: str) -> tuple[str, int]:
    """The host and port of an acceptable URL; Refused with the reason otherwise."""
    if not settings.DEEPTHINK_WEBHOOK_SECRET:
        raise Refused("Webhooks are off here: DEEPTHINK_WEBHOOK_SECRET is not set.")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as error:
        raise Refused(f"Not a valid URL: {error}.") from None
    if parts.scheme not in ("http", "https"):
        raise Refused("A webhook URL must start with http:// or https://.")
    if parts.username or parts.password:
        raise Refused("A webhook URL may not carry a user name or password.")
    host = (parts.hostname or "").lower()
    if not host:
        raise Refused("A webhook URL needs a host.")
    allowed = _allowed()
    if allowed and host not in allowed:
        raise Refused(f"The host {host} is not among the allowed webhook hosts.")
    return host, port or (443 if parts.scheme == "https" else 80)


def _resolve(host: str, port: int) -> list[Address]:
    try:
        return [ipaddress.ip_address(host.strip("[]"))]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as error:
        raise Refused(f"The host {host} could not be resolved ({error}).") from None
    return [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]


def check(url: str) -> Target:
    """Check a URL and resolve it: every address must be public or listed. Raises Refused."""
    host, port = check_syntax(url)
    addresses = _resolve(host, port)
    if not addresses:
        raise Refused(f"The host {host} has no address.")
    for address in addresses:
        if not _allowed_address(address):
            raise Refused(
                f"The host {host} resolves to {_described(address)}, a private, loopback or "
                "link-local address; webhooks may not call it unless it is listed in "
                "DEEPTHINK_WEBHOOK_ALLOWED_HOSTS."
            )
    return Target(url=url, host=host, port=port, address=str(addresses[0]))


def refusal(url: str) -> str:
    """Why this URL would be refused ("" if it is fine): for validating input."""
    try:
        check(url)
    except Refused as error:
        return str(error)
    return ""


def _pinned(target: Target) -> tuple[str, dict[str, str], dict[str, str]]:
    """The URL with the checked address in place of the host, the Host header, and the TLS
    name, so the connection goes where the check looked."""
    parts = urlsplit(target.url)
    ip = ipaddress.ip_address(target.address)
    literal = f"[{ip}]" if ip.version == 6 else str(ip)
    url = parts._replace(netloc=f"{literal}:{target.port}").geturl()
    default = 443 if parts.scheme == "https" else 80
    host = target.host if target.port == default else f"{target.host}:{target.port}"
    return url, {"Host": host}, {"sni_hostname": target.host}


@dataclass(frozen=True)
class Outcome:
    delivered: bool
    error: str = ""
    permanent: bool = False  # refused: retrying would not help


async def post(url: str, body: bytes, *, timeout: float | None = None) -> Outcome:
    """POST the signed body, following redirects by hand and checking every hop."""
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "DeepThink-Webhook/1",
        SIGNATURE_HEADER: sign(body),
    }
    timeout = timeout or settings.DEEPTHINK_WEBHOOK_TIMEOUT_SECONDS
    async with httpx.AsyncClient(
        follow_redirects=False, timeout=timeout, trust_env=False
    ) as client:
        for _hop in range(MAX_REDIRECTS + 1):
            try:
                target = await sync_to_async(check, thread_sensitive=False)(url)
            except Refused as error:
                return Outcome(False, str(error), permanent=True)
            pinned, host, extensions = _pinned(target)
            try:
                response = await client.post(
                    pinned, content=body, headers={**headers, **host}, extensions=extensions
                )
            except httpx.HTTPError as error:
                return Outcome(False, f"{type(error).__name__}: {error}"[:500])
            if response.is_redirect and "location" in response.headers:
                url = urljoin(url, response.headers["location"])
                continue
            if response.is_success:
                return Outcome(True)
            return Outcome(False, f"The webhook answered {response.status_code}.")
    return Outcome(False, f"More than {MAX_REDIRECTS} redirects.", permanent=True)
