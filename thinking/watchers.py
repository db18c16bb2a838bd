"""Whether any page is watching a session: its group on the channel layer has a member.

A session nobody watches needs no live render: a page that opens later catches up from the
database (`broadcast.catch_up`). The answer must be the layer's own, read fresh each time:
a page joins the group before it reads its catch-up, so a step committed before this check
reaches a page that joins after it through that read, and one that joined before through
the message. Any doubt (a layer this module does not know) counts as watched.
"""

from __future__ import annotations

import time
from typing import Any

from channels.layers import InMemoryChannelLayer
from channels_redis.core import RedisChannelLayer


async def has_members(layer: Any, group: str) -> bool:
    """Whether a `group_send` to `group` now would reach any channel.

    Reads the layer's own group records (the in-memory layer's `groups`, channels_redis's
    sorted set on the group's shard) and leaves out the members `group_send` would drop as
    older than `group_expiry`: the in-memory layer those that joined before this whole
    second less the expiry, channels_redis those at or before it."""
    if not isinstance(layer, InMemoryChannelLayer | RedisChannelLayer):
        return True
    cutoff = int(time.time()) - layer.group_expiry
    if isinstance(layer, InMemoryChannelLayer):
        members = layer.groups.get(group, {}).values()
        return any(not joined or joined >= cutoff for joined in members)
    connection = layer.connection(layer.consistent_hash(group))
    return await connection.zcount(layer._group_key(group), f"({cutoff}", "+inf") > 0
