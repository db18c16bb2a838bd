"""Whether a session's group has a page in it (thinking/page/watchers.py): the answer the publisher
skips renders on must be true exactly while a page that joined is there to be reached, in
one process (the in-memory layer, the local-memory cache) and over Redis (both on Redis)."""

from __future__ import annotations

import asyncio
import os
import secrets
from typing import Any

import pytest
from channels.layers import InMemoryChannelLayer

from tests.helpers import services_available
from thinking.page.watchers import has_members, join, leave

KINDS = ["memory", pytest.param("redis", marks=pytest.mark.services)]


def a_group() -> str:
    return f"session-{secrets.token_hex(8)}"


def make_layer(kind: str, settings: Any, expiry: int = 86400) -> Any:
    """The channel layer and the cache of one process (`memory`), or both on Redis, as
    config/settings.py pairs them."""
    if kind == "memory":
        return InMemoryChannelLayer(group_expiry=expiry)
    ok, reason = services_available()
    if not ok:
        pytest.skip(reason)
    from channels_redis.core import RedisChannelLayer

    prefix = f"watchers-{os.getpid()}-{secrets.token_hex(3)}"
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": os.environ["REDIS_URL"],
            "KEY_PREFIX": prefix,
        }
    }
    return RedisChannelLayer(
        hosts=[{"address": os.environ["REDIS_URL"], "socket_timeout": None}],
        prefix=prefix,  # flush() deletes prefix*
        group_expiry=expiry,
    )


async def reached(layer: Any, group: str, *channels: str) -> list[str]:
    """Which of `channels` a group_send now arrives on."""
    await layer.group_send(group, {"type": "session.update", "parts": []})
    found = []
    for channel in channels:
        try:
            await asyncio.wait_for(layer.receive(channel), timeout=0.5)
        except TimeoutError:
            continue
        found.append(channel)
    return found


async def close(layer: Any, kind: str) -> None:
    await layer.flush()
    if kind == "redis":
        await layer.close_pools()


@pytest.mark.parametrize("kind", KINDS)
async def test_a_session_is_watched_exactly_while_a_page_that_joined_is_there(
    kind: str, settings: Any
):
    layer = make_layer(kind, settings)
    group = a_group()
    try:
        first, second = await layer.new_channel(), await layer.new_channel()
        assert not await has_members(group)

        first_joined = await join(layer, group, first)
        assert await has_members(group)
        assert await reached(layer, group, first, second) == [first]
        assert not await has_members(a_group())

        second_joined = await join(layer, group, second)
        await leave(layer, group, first, first_joined)
        assert await has_members(group), "one page is still open"
        assert await reached(layer, group, first, second) == [second]

        await leave(layer, group, second, second_joined)
        assert not await has_members(group)
        assert await reached(layer, group, first, second) == []
    finally:
        await close(layer, kind)


@pytest.mark.parametrize("kind", KINDS)
async def test_a_count_left_behind_expires_and_a_page_leaving_late_keeps_a_newer_ones(
    kind: str, settings: Any
):
    """A page whose process died never leaves: its count lasts the layer's group expiry
    (a day by default, a second here). A page that leaves after longer than that does not
    take off the count of a page that joined since."""
    layer = make_layer(kind, settings, expiry=1)
    group = a_group()
    try:
        stale, fresh = await layer.new_channel(), await layer.new_channel()
        stale_joined = await join(layer, group, stale)
        assert await has_members(group)
        await asyncio.sleep(1.5)
        assert not await has_members(group)

        fresh_joined = await join(layer, group, fresh)
        await leave(layer, group, stale, stale_joined)
        assert await has_members(group)
        await leave(layer, group, fresh, fresh_joined)
        assert not await has_members(group)
    finally:
        await close(layer, kind)
