"""Where a session's wall time goes, step by step.

For one extra session (not one of the measured ones) the app's own async steps are wrapped
to record when they start and end; nothing is replaced or skipped. The wall time is then cut
into segments, and each segment is given to the most specific thing running at that moment:
a model call, a web search, publishing an update, storing a step, reading state, another
database hop, or nothing we traced (the event loop and the loop's glue code).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

# (module, attribute, category); earlier categories win where spans overlap.
CATEGORIES = (
    "model calls",
    "web searches",
    "knowledge-base searches",
    "publishing updates (render + group_send)",
    "storing steps (transactions)",
    "reading state",
    "other database hops",
)
TARGETS = (
    ("thinking.llm", "LLM._stream_once", "model calls"),
    ("research.web", "WebSearch._search_with_retry", "web searches"),
    ("thinking.evidence", "asearch_memory", "knowledge-base searches"),
    ("thinking.broadcast", "publish", "publishing updates (render + group_send)"),
    ("thinking.loop", "start", "storing steps (transactions)"),
    ("thinking.loop", "store_cycle", "storing steps (transactions)"),
    ("thinking.loop", "store_asked", "storing steps (transactions)"),
    ("thinking.loop", "store_written", "storing steps (transactions)"),
    ("thinking.steps", "save_plan", "storing steps (transactions)"),
    ("thinking.evidence", "store_found", "storing steps (transactions)"),
    ("thinking.tools", "save_progress", "storing steps (transactions)"),
    ("research.web", "store_rows", "storing steps (transactions)"),
    # Both store the cycle's "analysis" stage and read the prompt's material (mostly reads);
    # open_cycle also the status and focus, open_analysis alone after the focus's research.
    ("thinking.loop", "open_cycle", "reading state"),
    ("thinking.loop", "open_analysis", "reading state"),
    # A synthesis's stage (the final answer's two) and its prompt's reads.
    ("thinking.loop", "open_written", "reading state"),
    ("research.web", "cached_results", "reading state"),
    ("research.web", "cached_many", "reading state"),  # a plan's queries' reads, ahead
    ("channels.db", "DatabaseSyncToAsync.__call__", "other database hops"),
)


def _owner(module: str, path: str) -> tuple[Any, str]:
    owner: Any = importlib.import_module(module)
    *classes, name = path.split(".")
    for cls in classes:
        owner = getattr(owner, cls)
    return owner, name


@dataclass
class Trace:
    spans: list[tuple[float, float, str]] = field(default_factory=list)  # (start, end, category)
    queries: int = 0  # SQL statements executed (CursorWrapper.execute / executemany)


@contextlib.contextmanager
def traced() -> Iterator[Trace]:
    """Record (start, end, category) of every traced step inside the block, and count the
    SQL statements."""
    from django.db.backends.utils import CursorWrapper

    trace = Trace()
    spans = trace.spans
    patched = []

    def counting(original: Any) -> Any:
        @functools.wraps(original)
        def count(*args: Any, **kwargs: Any) -> Any:
            trace.queries += 1
            return original(*args, **kwargs)

        return count

    for name in ("execute", "executemany"):
        original = CursorWrapper.__dict__[name]
        setattr(CursorWrapper, name, counting(original))
        patched.append((CursorWrapper, name, original, True))

    def wrap(original: Any, category: str) -> Any:
        @functools.wraps(original)
        async def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.monotonic()
            try:
                return await original(*args, **kwargs)
            finally:
                spans.append((started, time.monotonic(), category))

        return timed

    for module, path, category in TARGETS:
        owner, name = _owner(module, path)
        own = name in vars(owner)
        original = getattr(owner, name)
        setattr(owner, name, wrap(original, category))
        patched.append((owner, name, original, own))
    try:
        yield trace
    finally:
        for owner, name, original, own in reversed(patched):
            if own:
                setattr(owner, name, original)
            else:
                delattr(owner, name)  # it was inherited


def breakdown(
    spans: list[tuple[float, float, str]], started: float, ended: float
) -> dict[str, float]:
    """Seconds of [started, ended] per category, each moment counted once."""
    inside = (t for s, e, _ in spans for t in (s, e) if started < t < ended)
    cuts = sorted({started, ended, *inside})
    rank = {name: index for index, name in enumerate(CATEGORIES)}
    totals = dict.fromkeys((*CATEGORIES, "untraced (event loop, glue code)"), 0.0)
    for left, right in itertools.pairwise(cuts):
        middle = (left + right) / 2
        active = [c for s, e, c in spans if s <= middle < e]
        where = min(active, key=rank.__getitem__) if active else "untraced (event loop, glue code)"
        totals[where] += right - left
    return totals
