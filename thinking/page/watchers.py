"""Whether any page is watching a session: the pages count themselves in Django's cache.

A session nobody watches needs no live render: a page that opens later catches up from the
database (`broadcast.catch_up`). A page joins its session's group with `join`, which adds it
to the group on the channel layer and then counts it in the cache (the local-memory cache in
one process, Redis when REDIS_URL is set, as the channel layer is: config/settings.py);
`leave` takes both back. `has_members` reads the count fresh each time. A page counts once
it is in the group and before it reads its catch-up, so a step committed before the check
reaches a page that joins after it through that read, and one that joined before through
the message.

A process that dies with pages open leaves their count behind: their sessions are rendered
for nobody until it expires, the layer's group expiry after the last page joined (a day by
default), as channels itself drops a group's members after that long. Erring that way costs
CPU, never an update a page should have had.
"""

from __future__ import annotations

import contextlib
import time

from asgiref.sync import sync_to_async
from channels.layers import BaseChannelLayer
from django.core.cache import cache

DEFAULT_EXPIRY = 86400  # channels' default group_expiry, in seconds


def _key(group: str) -> str:
    return f"watching:{group}"


def _expiry(layer: BaseChannelLayer) -> int:
    return int(getattr(layer, "group_expiry", DEFAULT_EXPIRY))


def _count_in(key: str, expiry: int) -> None:
    # add() sets a missing key only; incr() is atomic in both caches.
    cache.add(key, 0, timeout=expiry)
    try:
        cache.incr(key)
    except ValueError:  # expired between add() and incr()
        cache.set(key, 1, timeout=expiry)
    cache.touch(key, timeout=expiry)


def _count_out(key: str) -> None:
    with contextlib.suppress(ValueError):  # expired: nothing left to take back
        cache.decr(key)


def _counted(key: str) -> int:
    return int(cache.get(key, 0))


# Django's caches may be used from any thread: these calls need not queue behind the views'
# (and the consumers' database reads) on the one thread of `thread_sensitive`.
_count_in_async = sync_to_async(_count_in, thread_sensitive=False)
_count_out_async = sync_to_async(_count_out, thread_sensitive=False)
_counted_async = sync_to_async(_counted, thread_sensitive=False)


async def join(layer: BaseChannelLayer, group: str, channel: str) -> float:
    """Add a page's `channel` to `group`, then count it as watching. Returns when it was
    counted, for `leave`."""
    await layer.group_add(group, channel)
    await _count_in_async(_key(group), _expiry(layer))
    return time.monotonic()


async def leave(layer: BaseChannelLayer, group: str, channel: str, joined: float) -> None:
    """Undo a `join` that returned `joined`: the page no longer counts, and leaves the
    group. A page counted longer ago than the expiry is not taken off: its count may have
    expired, and another page's since then must stand."""
    if time.monotonic() - joined < _expiry(layer):
        await _count_out_async(_key(group))
    await layer.group_discard(group, channel)


async def has_members(group: str) -> bool:
    """Whether a page has joined `group` (`join`) and not left it, so a `group_send` to it
    now would reach one."""
    return await _counted_async(_key(group)) > 0
