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

from thinking.events import Publish, SessionEvent
from thinking.page.live import publish_safely


def merge(earlier: SessionEvent, later: SessionEvent) -> SessionEvent | None:
    """One event that shows everything both would, or None when they must go out apart.

    A live event is replaced by the next live one (it shows more of the same reasoning);
    stored steps that wait together become one render and send: their thoughts in order and
    the union of what else changed. New sources and sub-questions go out as all of them since
    the last message (`broadcast.render_event`), so nothing of either is lost. Two syntheses,
    or two different citation checks, stay apart (a message carries one of each)."""
    if earlier.live is not None or later.live is not None:
        return later if earlier.live is not None and later.live is not None else None
    if earlier.synthesis is not None and later.synthesis is not None:
        return None
    if None not in (earlier.checked, later.checked) and earlier.checked != later.checked:
        return None
    return SessionEvent(
        later.session_id,
        thoughts=earlier.thoughts + later.thoughts,
        synthesis=earlier.synthesis if earlier.synthesis is not None else later.synthesis,
        questions=earlier.questions or later.questions,
        finished=earlier.finished or later.finished,
        sources=earlier.sources or later.sources,
        plan=earlier.plan or later.plan,
        checked=earlier.checked if earlier.checked is not None else later.checked,
        header=earlier.header or later.header,
    )


class SessionPublisher:
    """A `Publish` that returns at once; one task sends the events in the order given.

    Events that wait together are sent as one where they can be (`merge`: a live-reasoning
    event followed by another, the sources of one search and the next search's, the steps
    several sessions' worth of load left waiting): one render and send instead of one each,
    so a renderer that falls behind catches up instead of falling further behind. When more
    than `limit` events wait, the caller waits for room, so the queue stays bounded.
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
                while self._pending and (both := merge(event, self._pending[0])) is not None:
                    self._pending.popleft()
                    event = both
                self._room.set()
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
