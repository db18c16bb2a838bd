"""A cap on each person's open live pages (issue 73): DEEPTHINK_WS_MAX_PER_USER WebSockets.

Every open socket holds one of its user's numbered slots in Django's cache, taken with an
atomic `add` (a slot is a key that only one socket can create): on embedded defaults the
local-memory cache of the one process, with REDIS_URL the Redis every process shares, so the
cap counts a person's sockets across all web processes. A slot is a lease: the socket renews
it while it is open and gives it back when it closes, and one left by a process that died
(kill -9, a lost machine) runs out within LEASE_SECONDS, so nobody stays locked out.
"""

from __future__ import annotations

from django.conf import settings
from django.core.cache import cache

LEASE_SECONDS = 60
RENEW_SECONDS = LEASE_SECONDS / 3


def _key(user_id: int, slot: int) -> str:
    return f"live-socket:{user_id}:{slot}"


def take_slot(user_id: int, channel_name: str) -> str | None:
    """A free slot of this user's, now held by this socket (its cache key), or None when
    all of them are taken."""
    for slot in range(settings.DEEPTHINK_WS_MAX_PER_USER):
        key = _key(user_id, slot)
        if cache.add(key, channel_name, timeout=LEASE_SECONDS):
            return key
    return None


def renew(key: str, channel_name: str) -> bool:
    """Keep holding the slot; False if it ran out meanwhile and another socket took it."""
    if cache.get(key) != channel_name:
        return cache.add(key, channel_name, timeout=LEASE_SECONDS)
    return cache.touch(key, LEASE_SECONDS)


def release(key: str, channel_name: str) -> None:
    if cache.get(key) == channel_name:
        cache.delete(key)
