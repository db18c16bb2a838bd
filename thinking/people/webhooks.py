"""Webhooks (#19): which URLs may be called, signing, and one delivery attempt.

A webhook URL is checked when it is given and again before every request and every
redirect hop: the host must be allowed (DEEPTHINK_WEBHOOK_ALLOWED_HOSTS, when set) and every
address it resolves to must be public, unless that address is listed explicitly. The request
then goes to the checked address itself (Host header and TLS name set to the host), so a DNS
answer that changes between the check and the connection cannot redirect it.

Deliveries follow Standard Webhooks (https://www.standardwebhooks.com/): `webhook-id` (the
same on every attempt), `webhook-timestamp` (fresh on every attempt) and `webhook-signature`,
`v1,` and the base64 HMAC-SHA256 of "{id}.{timestamp}.{body}" under the session owner's own
key (accounts.webhook_secrets). A receiver checks the signature and the timestamp's age, so a
replayed delivery is refused and a retry is told apart by its id.

One attempt has a total deadline (DEEPTHINK_WEBHOOK_TIMEOUT_SECONDS, every redirect hop
included), however slowly the receiver drips its answer, and reads at most
MAX_REPLY_BYTES of the reply, raw: asking for `Accept-Encoding: identity` and never decoding,
so neither a huge nor a compressed reply reaches memory.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import ipaddress
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx
from asgiref.sync import sync_to_async
from django.conf import settings

from accounts import webhook_secrets

MAX_REDIRECTS = 3
MAX_REPLY_BYTES = 4096  # of a reply, read for the delivery's record; the rest is never read
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class Refused(Exception):
    """The URL may not be called; the message says why."""


def _key(secret: str) -> bytes:
    return base64.b64decode(secret.removeprefix(webhook_secrets.PREFIX))


def signature(message_id: str, timestamp: int, body: bytes, secrets: Sequence[str]) -> str:
    """The `webhook-signature` header: `v1,<base64 HMAC-SHA256>` of "{id}.{timestamp}.{body}"
    for each key, separated by spaces (two during a key's rotation)."""
    signed = f"{message_id}.{timestamp}.".encode() + body
    return " ".join(
        "v1," + base64.b64encode(hmac.new(_key(s), signed, hashlib.sha256).digest()).decode()
        for s in secrets
    )


def signed_headers(message_id: str, body: bytes, secrets: Sequence[str]) -> dict[str, str]:
    """The Standard Webhooks headers for one attempt: the timestamp is now."""
    timestamp = int(time.time())
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature(message_id, timestamp, body, secrets),
    }


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
    if not settings.DEEPTHINK_WEBHOOKS:
        raise Refused("Webhooks are off here (DEEPTHINK_WEBHOOKS).")
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


NEEDS_KEY = (
    "Make your webhook signing key on your account page (/settings/tokens/) first: "
    "receivers check every delivery's signature with it."
)


def refusal(url: str, owner: Any = None) -> str:
    """Why this URL would be refused ("" if it is fine): for validating input. With `owner`,
    also refused while that person has no signing key."""
    try:
        check(url)
    except Refused as error:
        return str(error)
    if owner is not None and webhook_secrets.of(owner) is None:
        return NEEDS_KEY
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


def _snippet(data: bytes) -> str:
    """The start of a reply, for the delivery's record (stored, shown escaped in the admin):
    printable text only (a NUL, say, cannot be stored in PostgreSQL's text)."""
    text = "".join(c if c.isprintable() else " " for c in data.decode("utf-8", "replace"))
    return " ".join(text.split())[:200]


async def _start_of(response: httpx.Response) -> bytes:
    """At most MAX_REPLY_BYTES of the reply as it came over the wire (never decompressed);
    the rest is never read: closing the response drops the connection."""
    kept = bytearray()
    try:
        async for chunk in response.aiter_raw():
            kept += chunk[: MAX_REPLY_BYTES - len(kept)]
            if len(kept) >= MAX_REPLY_BYTES:
                break
    except httpx.HTTPError:
        pass  # the reply broke off: what came is enough for the record
    return bytes(kept)


async def _post_hops(
    client: httpx.AsyncClient, url: str, body: bytes, headers: Mapping[str, str]
) -> Outcome:
    for _hop in range(MAX_REDIRECTS + 1):
        try:
            target = await sync_to_async(check, thread_sensitive=False)(url)
        except Refused as error:
            return Outcome(False, str(error), permanent=True)
        pinned, host, extensions = _pinned(target)
        request = client.build_request(
            "POST", pinned, content=body, headers={**headers, **host}, extensions=extensions
        )
        try:
            response = await client.send(request, stream=True)
        except httpx.HTTPError as error:
            return Outcome(False, f"{type(error).__name__}: {error}"[:500])
        try:
            if response.is_redirect and "location" in response.headers:
                url = urljoin(url, response.headers["location"])
                continue
            if response.is_success:
                return Outcome(True)
            said = _snippet(await _start_of(response))
            return Outcome(
                False,
                f"The webhook answered {response.status_code}" + (f": {said}" if said else "."),
            )
        finally:
            await response.aclose()
    return Outcome(False, f"More than {MAX_REDIRECTS} redirects.", permanent=True)


async def post(
    url: str,
    body: bytes,
    *,
    headers: Mapping[str, str] | None = None,
    deadline: float | None = None,
) -> Outcome:
    """POST the body with `headers` (the signature: `signed_headers`), following redirects
    by hand and checking every hop, all within `deadline` seconds
    (DEEPTHINK_WEBHOOK_TIMEOUT_SECONDS): a receiver that answers a byte at a time is cut
    off there, whatever httpx's per-read timeouts would allow."""
    deadline = deadline or settings.DEEPTHINK_WEBHOOK_TIMEOUT_SECONDS
    sent = {
        "Content-Type": "application/json",
        "User-Agent": "DeepThink-Webhook/2",
        "Accept-Encoding": "identity",
        **(headers or {}),
    }
    try:
        async with (
            asyncio.timeout(deadline),
            httpx.AsyncClient(follow_redirects=False, timeout=deadline, trust_env=False) as client,
        ):
            return await _post_hops(client, url, body, sent)
    except TimeoutError:
        return Outcome(False, f"No complete answer within {deadline:g} s.")
