"""Where a worker's time goes: CPU per thread and per machine (Linux /proc), how long the
database thread is occupied, and a cProfile summary.

cProfile on Python 3.12+ hooks `sys.monitoring`, so it records every thread (here: the event
loop and asgiref's database thread) into one call stack. Self times stay meaningful: with the
GIL only one thread runs Python at a time, and a blocking C call (a socket wait, epoll) loses
the time another thread's calls run on top of it. Cumulative times are not exact: a function of
one thread can count the other thread's calls made while it was on the stack. The profiler
also slows Python-heavy code more than waits, so the profiled run is separate from the measured
ones.
"""

from __future__ import annotations

import contextlib
import cProfile
import functools
import os
import pstats
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OURS = (str(ROOT / "thinking") + os.sep, str(ROOT / "research") + os.sep)
OWN = "our code (thinking/, research/)"
IDLE = "waiting for work or I/O (idle)"

AREAS = (
    ("/django/template", "Django templates"),
    ("/django/db/backends/", "database driver (Django backend, psycopg/sqlite3)"),
    ("/psycopg", "database driver (Django backend, psycopg/sqlite3)"),
    ("/sqlite3/", "database driver (Django backend, psycopg/sqlite3)"),
    ("/django/db/", "Django ORM"),
    ("/django/", "Django, other"),
    ("/anthropic/", "model client (anthropic SDK, httpx, pydantic)"),
    ("/httpx", "model client (anthropic SDK, httpx, pydantic)"),
    ("/httpcore", "model client (anthropic SDK, httpx, pydantic)"),
    ("/h11/", "model client (anthropic SDK, httpx, pydantic)"),
    ("/anyio/", "model client (anthropic SDK, httpx, pydantic)"),
    ("/pydantic", "model client (anthropic SDK, httpx, pydantic)"),
    ("/exa_py/", "web search client (exa-py)"),
    ("/channels", "channels, asgiref, Redis"),
    ("/asgiref/", "channels, asgiref, Redis"),
    ("/redis/", "channels, asgiref, Redis"),
    ("/msgpack/", "channels, asgiref, Redis"),
    ("/asyncio/", "event loop (asyncio)"),
    ("/selectors.py", "event loop (asyncio)"),
)
# Builtins that only wait: the loop's epoll, an idle executor thread's queue, locks.
WAITS = ("of 'select.epoll' objects", "of '_queue.SimpleQueue' objects", "of '_thread.lock'")


def _area(path: str) -> str:
    if path.startswith(OURS):
        return OWN
    for needle, area in AREAS:
        if needle in path:
            return area
    return "other packages" if "site-packages" in path else "standard library"


def _label(path: str, line: int, name: str) -> str:
    with contextlib.suppress(ValueError):
        path = str(Path(path).relative_to(ROOT))
    return f"{path}:{line}({name})"


def profile_summary(profile: cProfile.Profile, top: int = 12) -> dict[str, Any]:
    """Self time by area (a builtin's time goes to the area of the code that called it),
    and our functions with the most cumulative time; shares of the time not spent idle."""
    stats: dict[tuple[str, int, str], Any] = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    areas: Counter[str] = Counter()
    for (path, _, name), (_, _, tottime, _, callers) in stats.items():
        if path != "~":
            areas[_area(path)] += tottime
        elif any(wait in name for wait in WAITS):
            areas[IDLE] += tottime
        elif callers:
            for (caller_path, _, _), (_, _, from_caller, _) in callers.items():
                areas[_area(caller_path)] += from_caller
        else:
            areas["standard library"] += tottime
    busy = max(1e-9, sum(t for area, t in areas.items() if area != IDLE))
    ours = sorted(
        ((cum, key) for key, (_, _, _, cum, _) in stats.items() if key[0].startswith(OURS)),
        reverse=True,
    )
    return {
        "profiled_seconds": round(sum(areas.values()), 3),
        "idle_seconds": round(areas[IDLE], 3),
        "areas_of_busy": {
            area: round(t / busy, 3) for area, t in areas.most_common() if area != IDLE
        },
        "own_code_self_share": round(areas[OWN] / busy, 3),
        "top_own_functions_cumulative": [
            {"function": _label(*key), "share_of_busy": round(cum / busy, 3)}
            for cum, key in ours[:top]
        ],
    }


# --- CPU and occupancy ------------------------------------------------------------------


def thread_cpu_seconds(native_id: int) -> float:
    """User + system CPU of one thread of this process (Linux; 0 elsewhere)."""
    try:
        stat = Path(f"/proc/self/task/{native_id}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_cpu_seconds() -> dict[str, float]:
    """CPU seconds so far (Linux): all cores busy, and the local PostgreSQL and Redis server
    processes (the postmaster's reaped backends included), for shares over a stretch."""
    ticks = os.sysconf("SC_CLK_TCK")
    result = {"machine_busy": 0.0, "postgres": 0.0, "redis": 0.0}
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return result
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    result["machine_busy"] = (sum(fields[:8]) - idle) / ticks
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name = text[text.find("(") + 1 : text.rfind(")")]
        key = "postgres" if name == "postgres" else "redis" if name.startswith("redis") else ""
        if key:
            values = text.rsplit(")", 1)[1].split()
            result[key] += sum(int(v) for v in values[11:15]) / ticks
    return result


def cpu_shares(before: dict[str, float], after: dict[str, float], wall: float) -> dict[str, float]:
    """Shares of one core over `wall` seconds (2.0 = two cores busy)."""
    return {name: round((after[name] - before[name]) / wall, 3) for name in before}


class Occupancy:
    """How long executor threads are occupied running sync_to_async and
    database_sync_to_async calls (the call itself, and channels' closing of old connections
    around it), by native thread id. Exact, unlike sampling; it wraps asgiref's and channels'
    `thread_handler` for the duration of the block."""

    def __init__(self) -> None:
        self.busy: defaultdict[int, float] = defaultdict(float)
        self._local = threading.local()
        self._patched: list[tuple[type, Any]] = []

    def _wrap(self, original: Any) -> Any:
        local, busy = self._local, self.busy

        @functools.wraps(original)
        def handler(*args: Any, **kwargs: Any) -> Any:
            depth = getattr(local, "depth", 0)
            local.depth = depth + 1
            started = time.monotonic()
            try:
                return original(*args, **kwargs)
            finally:
                local.depth = depth
                if depth == 0:  # channels' handler calls asgiref's: count once
                    busy[threading.get_native_id()] += time.monotonic() - started

        return handler

    def __enter__(self) -> Occupancy:
        from asgiref.sync import SyncToAsync
        from channels.db import DatabaseSyncToAsync

        for cls in (DatabaseSyncToAsync, SyncToAsync):
            original = vars(cls)["thread_handler"]
            cls.thread_handler = self._wrap(original)  # type: ignore[method-assign]
            self._patched.append((cls, original))
        return self

    def __exit__(self, *exc: object) -> None:
        for cls, original in reversed(self._patched):
            cls.thread_handler = original  # type: ignore[method-assign]
        self._patched.clear()


def rss_mb(pid: int | str = "self") -> float:
    """Resident memory of this process (or another) now, in MB (Linux; 0 elsewhere)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class PeakRSS:
    """The highest resident memory seen while the block runs (sampled every `every` s)."""

    def __init__(self, every: float = 0.1) -> None:
        self.every = every
        self.before = 0.0
        self.peak = 0.0
        self._task: Any = None

    async def _sample(self) -> None:
        import asyncio

        while True:
            self.peak = max(self.peak, rss_mb())
            await asyncio.sleep(self.every)

    async def __aenter__(self) -> PeakRSS:
        import asyncio
        import gc

        gc.collect()
        self.before = self.peak = rss_mb()
        self._task = asyncio.create_task(self._sample())
        return self

    async def __aexit__(self, *exc: object) -> None:
        import asyncio

        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        self.peak = max(self.peak, rss_mb())
