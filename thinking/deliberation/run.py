"""What one run of the loop works with: its collaborators and its clock.

The loop reaches the model, research, the live stream and time only through a `Run`, so a
test can hand in a fake clock and step through time instead of sleeping.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from thinking.events import Publish

if TYPE_CHECKING:
    from thinking.deliberation.evidence import Research
    from thinking.provider.llm import LLM


@dataclass(frozen=True)
class Clock:
    """Monotonic time for durations, wall time for what pages show, and sleeping."""

    monotonic: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep


class Meter:
    """Active thinking time from a monotonic clock, handed out in laps as steps are stored."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = clock or Clock()
        self._mark = self.clock.monotonic()

    def pending(self) -> float:
        """Seconds since the last lap: active time not stored yet."""
        return self.clock.monotonic() - self._mark

    def lap(self) -> float:
        now = self.clock.monotonic()
        elapsed, self._mark = now - self._mark, now
        return elapsed


@dataclass
class Run:
    """The collaborators of one run of one session, handed to every step. The meter runs
    on the clock: `Run(..., meter=Meter(clock), clock=clock)`."""

    llm: LLM
    research: Research
    publish: Publish
    worker_id: str
    meter: Meter
    clock: Clock = field(default_factory=Clock)


# One object per running event loop: a worker's supervisor, its pause-and-cancel watcher.
#
# Each holds tasks, futures or connections bound to the loop it was made on, so a second
# loop (a test's, a management command's `asyncio.run`) gets its own. The loop is held
# weakly, but an object that refers to its loop keeps it (the supervisor does: it lives as
# long as its process).
class PerLoop[T]:
    """`get()`: the running loop's `T`, made by `make` on first use there."""

    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self._made: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, T] = (
            weakref.WeakKeyDictionary()
        )

    def get(self) -> T:
        running = asyncio.get_running_loop()
        found = self._made.get(running)
        if found is None:
            found = self._made[running] = self._make()
        return found
