"""Domain events the loop publishes. The broadcaster turns them into HTML."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class LiveStep:
    """A model call in flight, not stored yet: what the "model reasoning" panel shows."""

    purpose: str  # thoughts / questions / synthesis / final
    started_at: float  # wall clock (epoch seconds), so pages can count "thinking… Ns"
    reasoning: str = ""  # the model's thinking so far
    writing: bool = False  # text has started to arrive


@dataclass(frozen=True)
class SessionEvent:
    session_id: uuid.UUID
    thoughts: tuple[int, ...] = ()  # sequences of thoughts just stored
    synthesis: int | None = None  # sequence of a synthesis just stored
    questions: bool = False  # the sub-question list changed
    finished: bool = False  # the session reached completed / failed / cancelled
    sources: bool = False  # new sources were stored
    plan: bool = False  # the plan, its current step, the progress line or research notes changed
    live: LiveStep | None = None  # a step in flight (nothing stored by this event)
    checked: int | None = None  # sequence of a synthesis whose citations were just checked
    # False when nothing the header shows changed (a stage entered: the plan region only).
    header: bool = True


Publish = Callable[[SessionEvent], Awaitable[None]]


async def publish_nothing(event: SessionEvent) -> None:
    """For runs nobody watches."""
