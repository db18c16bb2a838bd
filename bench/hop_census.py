"""CPU per model call, by where it is spent: each database hop function and each kind of
live update.

    .venv/bin/python -m bench.hop_census                  # SQLite (a throwaway file)
    DATABASE_URL=postgres://... REDIS_URL=redis://... .venv/bin/python -m bench.hop_census
    .venv/bin/python -m bench.hop_census --cycles 200     # a long session
    .venv/bin/python -m bench.hop_census --no-page        # nobody watching: no renders

Runs one warm-up session and then one measured session against the fake servers (in their
own process, as `make bench` does), with every database hop's thread CPU (`time.thread_time`
inside the hop) summed by the function it runs, and every render of a live update summed
by what the update carries. Prints the process's CPU per model call, the event loop's, and
the table. Exact counts, unlike sampling; the timings of one run vary by ±10% on a shared
machine, so compare runs side by side (issue 17, bench/README.md).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import functools
import resource
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from . import harness
from .fakehost import FakeHost


def update_kind(event: Any) -> str:
    """What a live update carries, by the part that costs most to draw."""
    if event.live is not None:
        return "live reasoning"
    for kind, present in (
        ("synthesis", event.synthesis is not None),
        ("citation check", event.checked is not None),
        ("thoughts", bool(event.thoughts)),
        ("finished", event.finished),
        ("stage entered", not event.header),
        ("sub-questions", event.questions),
        ("sources", event.sources),
        ("plan", event.plan),
    ):
        if present:
            return kind
    return "header"


def hop_name(func: Any) -> str:
    """Module and name of what a hop runs. Never its repr as a default: a bound method's
    repr shows its object, and a queryset's repr runs its query (and a query per deferred
    field its rows' `__str__` reads), inside the timed hop."""
    name = getattr(func, "__qualname__", None)
    return f"{getattr(func, '__module__', '')}.{name}" if name else type(func).__name__


class Census:
    """Thread CPU (and wall time) summed by hop function and by kind of live update."""

    def __init__(self) -> None:
        self.cpu: collections.Counter[str] = collections.Counter()
        # Wall time: a render's CPU plus its waits on the database.
        self.wall: collections.Counter[str] = collections.Counter()
        self.calls: collections.Counter[str] = collections.Counter()
        self._local = threading.local()
        self._render: Callable[..., Any] | None = None

    def clear(self) -> None:
        self.cpu.clear()
        self.wall.clear()
        self.calls.clear()

    def add(self, name: str, started: tuple[float, float]) -> None:
        cpu, wall = started
        self.cpu[name] += time.thread_time() - cpu
        self.wall[name] += time.monotonic() - wall
        self.calls[name] += 1

    def _hop(self, original: Callable[..., Any]) -> Callable[..., Any]:
        local = self._local

        @functools.wraps(original)
        def handler(hop: Any, *args: Any, **kwargs: Any) -> Any:
            # channels' handler calls asgiref's: count the outer one only.
            depth = getattr(local, "depth", 0)
            local.depth = depth + 1
            started = time.thread_time(), time.monotonic()
            try:
                return original(hop, *args, **kwargs)
            finally:
                local.depth = depth
                func = getattr(hop, "func", None)
                if depth == 0 and func is not self._render:  # a render counts itself, by kind
                    self.add(f"hop {hop_name(func)}", started)

        return handler

    @contextmanager
    def installed(self) -> Iterator[Census]:
        from asgiref.sync import SyncToAsync
        from channels.db import DatabaseSyncToAsync

        from thinking import broadcast

        render = broadcast.render_event

        def counted_render(event: Any) -> Any:
            started = time.thread_time(), time.monotonic()
            try:
                return render(event)
            finally:
                self.add(f"render {update_kind(event)}", started)

        handlers = [
            (cls, vars(cls)["thread_handler"]) for cls in (DatabaseSyncToAsync, SyncToAsync)
        ]
        for cls, original in handlers:
            cls.thread_handler = self._hop(original)  # type: ignore[method-assign]
        self._render = counted_render
        broadcast.render_event = counted_render
        try:
            yield self
        finally:
            broadcast.render_event = render
            for cls, original in handlers:
                cls.thread_handler = original  # type: ignore[method-assign]


def process_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=40)
    parser.add_argument("--latency", type=float, default=0.0, help="each fake call, seconds")
    parser.add_argument("--synthesis", type=float, default=2.0, help="interval, active seconds")
    parser.add_argument(
        "--no-page", action="store_true", help="no page open: the live renders are skipped"
    )
    args = parser.parse_args()
    fakes = FakeHost().start()
    setup = harness.prepare(quick=False, fakes=fakes)
    try:
        harness.start_django()
        from .scenarios import _new_sessions, _new_user, _requests_of

        census = Census()

        async def session(tag: str) -> tuple[int, float, float, float]:
            fakes.reset()
            fakes.configure(delay=args.latency, exa_delay=args.latency, cycles=args.cycles)
            user = await _new_user(f"census-{setup.run_id}-{tag}")
            key = f"{setup.run_id}-census-{tag}"
            runs = await _new_sessions(user, [key], synthesis_seconds=args.synthesis)
            census.clear()
            loop_started, cpu_started = time.thread_time(), process_cpu()
            await harness.run_supervised(
                runs, timeout=60 + 5 * args.cycles, watched=not args.no_page
            )
            loop_cpu, cpu = time.thread_time() - loop_started, process_cpu() - cpu_started
            calls = len(_requests_of(fakes.stats(), key))
            return calls, runs[0].wall, loop_cpu, cpu

        with census.installed():
            asyncio.run(session("warm-up"))
            calls, wall, loop_cpu, cpu = asyncio.run(session("measured"))
        print(
            f"{setup.database}: {args.cycles} cycles, {calls} model calls, "
            f"{'no page' if args.no_page else 'a page'} open, L = "
            f"{args.latency * 1000:.0f} ms, wall {wall:.2f} s\n"
            f"CPU per model call: process {1000 * cpu / calls:.1f} ms, "
            f"event loop {1000 * loop_cpu / calls:.1f} ms, "
            f"hops and renders {1000 * sum(census.cpu.values()) / calls:.1f} ms"
        )
        # Wall time is CPU plus the waits on the database (and for the interpreter lock).
        print(f"{'where':56} {'count':>6} {'ms each':>8} {'wall ms':>8} {'ms/call':>8}")
        for name, seconds in census.cpu.most_common():
            count, wall = census.calls[name], census.wall[name]
            each, wall_each = 1000 * seconds / count, 1000 * wall / count
            per_call = 1000 * seconds / calls
            print(f"{name[:56]:56} {count:6d} {each:8.2f} {wall_each:8.2f} {per_call:8.2f}")
    finally:
        harness.teardown(setup)
        fakes.stop()


if __name__ == "__main__":
    main()
