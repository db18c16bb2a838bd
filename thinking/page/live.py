"""What the page sees of a step before it is stored: the model's reasoning as it streams,
and publishing that never stops the thinking."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field

from thinking.deliberation.run import Clock
from thinking.events import LiveStep, Publish, SessionEvent

logger = logging.getLogger(__name__)


async def publish_safely(publish: Publish, event: SessionEvent) -> None:
    # A lost live update is recovered from the database on reconnect; it must never
    # stop the thinking.
    try:
        await publish(event)
    except Exception:
        logger.exception("Could not publish an update for session %s", event.session_id)


@dataclass
class LiveReasoning:
    """Streams a call's thinking to the page, at most once per `interval` seconds."""

    session_id: uuid.UUID
    purpose: str
    publish: Publish
    interval: float
    clock: Clock = field(default_factory=Clock)
    started_at: float = 0.0  # wall clock, for the page's "thinking… Ns"
    text: str = ""
    writing: bool = False
    _last: float = 0.0

    def __post_init__(self) -> None:
        self.started_at = self.started_at or self.clock.wall()

    def event(self) -> SessionEvent:
        live = LiveStep(self.purpose, self.started_at, self.text, self.writing)
        return SessionEvent(self.session_id, live=live)

    async def start(self) -> None:
        self._last = self.clock.monotonic()
        await publish_safely(self.publish, self.event())

    async def on_thinking(self, delta: str) -> None:
        self.text += delta
        await self._maybe_publish()

    async def on_text(self, delta: str) -> None:
        if not self.writing:
            self.writing = True
            self._last = 0.0  # show the switch from thinking to writing at once
        await self._maybe_publish()

    async def restart(self) -> None:
        """The call is made again (its stream broke off, or its reply was cut off): what was
        shown of it is not the reply, so the page starts over, at once."""
        self.text, self.writing = "", False
        self._last = self.clock.monotonic()
        await publish_safely(self.publish, self.event())

    async def _maybe_publish(self) -> None:
        now = self.clock.monotonic()
        if now - self._last >= self.interval:
            self._last = now
            await publish_safely(self.publish, self.event())
