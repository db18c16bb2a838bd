"""Domain events the loop publishes after each commit. The broadcaster turns them into HTML."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class SessionEvent:
    session_id: uuid.UUID
    thoughts: tuple[int, ...] = ()  # sequences of thoughts just stored
    synthesis: int | None = None  # sequence of a synthesis just stored
    questions: bool = False  # the sub-question list changed
    finished: bool = False  # the session reached completed / failed / cancelled


Publish = Callable[[SessionEvent], Awaitable[None]]


async def publish_nothing(event: SessionEvent) -> None:
    """For runs nobody watches."""
