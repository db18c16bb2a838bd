"""Whether a session's group has a page in it: the answer the publisher skips renders on must
be the one `group_send` acts on, in memory and over Redis."""

from __future__ import annotations

import asyncio
import math
import os
import secrets
import time
from typing import Any

import pytest
from channels.layers import InMemoryChannelLayer

from tests.helpers import services_available
from thinking.watchers import has_members

GROUP = "session-7d3f0b0e-0000-4000-8000-000000000000"


def make_layer(kind: str) -> Any:
    """A layer whose members expire after two seconds, as the real ones do after a day."""
    if kind == "memory":
        return InMemoryChannelLayer(group_expiry=2)
    ok, reason = services_available()
    if not ok:
        pytest.skip(reason)
    from channels_redis.core import RedisChannelLayer

    return RedisChannelLayer(
        hosts=[{"address": os.environ["REDIS_URL"], "socket_timeout": None}],
        prefix=f"watchers-{os.getpid()}-{secrets.token_hex(3)}",  # flush() deletes prefix*
        group_expiry=2,
    )


async def reaches(layer: Any, channel: str) -> bool:
    """Whether a group_send now arrives on `channel`."""
    await layer.group_send(GROUP, {"type": "session.update", "parts": []})
    try:
        await asyncio.wait_for(layer.receive(channel), timeout=0.5)
    except TimeoutError:
        return False
    return True


@pytest.mark.parametrize("kind", ["memory", pytest.param("redis", marks=pytest.mark.services)])
async def test_a_group_has_members_exactly_when_a_group_send_reaches_one(kind: str):
    layer = make_layer(kind)
    try:
        await layer.flush()
        channel = await layer.new_channel()
        assert not await has_members(layer, GROUP)

        await layer.group_add(GROUP, channel)
        assert await has_members(layer, GROUP)
        assert await reaches(layer, channel)
        assert not await has_members(layer, "session-another")

        await layer.group_discard(GROUP, channel)
        assert not await has_members(layer, GROUP)
        assert not await reaches(layer, channel)

        # A member past the layer's group expiry is one group_send drops, even while the
        # group lives on (Redis keeps the group's key for the expiry after the last join).
        await layer.group_add(GROUP, channel)
        joined = time.time()
        await asyncio.sleep(1.5)
        passing = await layer.new_channel()
        await layer.group_add(GROUP, passing)
        await layer.group_discard(GROUP, passing)
        # Until this whole second less the expiry is past the join.
        await asyncio.sleep(math.floor(joined) + 3.05 - time.time())
        assert not await has_members(layer, GROUP)
        assert not await reaches(layer, channel)
    finally:
        await layer.flush()
        if kind == "redis":
            await layer.close_pools()


async def test_a_layer_it_does_not_know_counts_as_watched():
    class Elsewhere:
        """A channel layer this module cannot read (say, a third-party one)."""

    assert await has_members(Elsewhere(), GROUP)
