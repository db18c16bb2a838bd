"""Helpers shared by the tests (fixtures live in conftest.py): import from here, never from
another test module."""

from __future__ import annotations

import asyncio

from thinking.run import Clock


class FrozenClock:
    """Time that moves only when a test (or a fake server, or a sleep) moves it."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return 1_700_000_000.0 + self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    async def sleep(self, seconds: float) -> None:
        # A sleep passes at once: the time moves on, other tasks get their turn.
        self.now += seconds
        await asyncio.sleep(0)

    @property
    def clock(self) -> Clock:
        return Clock(monotonic=self.monotonic, wall=self.wall, sleep=self.sleep)
