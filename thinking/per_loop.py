"""One object per running event loop: a worker's supervisor, its pause-and-cancel watcher.

Each holds tasks, futures or connections bound to the loop it was made on, so a second
loop (a test's, a management command's `asyncio.run`) gets its own. The loop is held
weakly, but an object that refers to its loop keeps it (the supervisor does: it lives as
long as its process).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable


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
