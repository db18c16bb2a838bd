"""What one run of the loop works with: its collaborators and its clock.

The loop reaches the model, research, the live stream and time only through a `Run`, so a
test can hand in a fake clock and step through time instead of sleeping.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .events import Publish

if TYPE_CHECKING:
    from .evidence import Research
    from .llm import LLM


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
