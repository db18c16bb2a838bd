"""Publishing a session's updates off its critical path, in order.

Rendering a step's partials and sending them to the group takes a database hop, several
templates and a channel-layer send. Awaited inline it delays the session's next model call;
here the loop only queues the event and one task per session renders and sends the queue
in order. The page's sequence de-duplication stays the safety net for anything it already
has.
"""

from __future__ import annotations

import asyncio
import collections

from .events import Publish, SessionEvent
from .live import publish_safely


def covers(later: SessionEvent, earlier: SessionEvent) -> bool:
    """Whether sending `later` shows everything `earlier` would, so `earlier` may be skipped
    when both wait: a live event by the next live one; an event with no rows of its own
    (the new sources of one search, the plan, the header) by one that re-renders at least
    as much. New sources and sub-questions go out as all of them since the last message
    (`broadcast.render_event`), so a skipped event's rows come with the next one."""
    if earlier.live is not None:
        return later.live is not None
    if later.live is not None or earlier.thoughts or earlier.synthesis is not None:
        return False
    return (
        earlier.checked in (None, later.checked)
        and later.sources >= earlier.sources
        and later.plan >= earlier.plan
        and later.questions >= earlier.questions
        and later.finished >= earlier.finished
    )


class SessionPublisher:
    """A `Publish` that returns at once; one task sends the events in the order given.

    An event that the next waiting one covers (`covers`: a live-reasoning event followed by
    another, the sources of one search followed by the next search's) is skipped: the later
    one shows everything it showed. A burst, such as a research wave whose searches finish
    together, is then one render and send. When more than `limit` events wait (the renderer
    cannot keep up), the caller waits for room, so the queue stays bounded.
    """

    def __init__(self, publish: Publish, *, limit: int = 64) -> None:
        self._publish = publish
        self._limit = limit
        self._pending: collections.deque[SessionEvent] = collections.deque()
        self._wake = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._closing = False
        self._task: asyncio.Task[None] | None = None

    async def __call__(self, event: SessionEvent) -> None:
        while len(self._pending) >= self._limit:
            self._room.clear()
            await self._room.wait()
        self._pending.append(event)
        self._wake.set()
        if self._task is None:
            self._task = asyncio.create_task(self._drain(), name=f"publish-{event.session_id}")

    async def _drain(self) -> None:
        while True:
            while self._pending:
                event = self._pending.popleft()
                if len(self._pending) < self._limit:
                    self._room.set()
                if self._pending and covers(self._pending[0], event):
                    continue  # the next one shows all this one would
                await publish_safely(self._publish, event)
            if self._closing:
                return
            self._wake.clear()
            await self._wake.wait()

    @property
    def pending(self) -> int:
        return len(self._pending)

    async def aclose(self) -> None:
        """Send what is queued, then stop (the session's run has ended)."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            await self._task
