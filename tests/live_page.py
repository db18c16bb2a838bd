"""A session page as the browser holds it, for WebSocket tests: frames applied the way htmx's
ws extension does (each top-level element is an out-of-band swap), with the errors htmx would
raise (a swap whose target is missing) and rows shown twice recorded instead of ignored."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from html.parser import HTMLParser
from typing import Any

from tests.helpers import communicator, login

__all__ = ["Page", "communicator", "drain", "login", "receive_until"]

VOID = {"br", "img", "input", "meta", "link", "circle", "line", "polyline", "hr", "polygon"}
ROW = re.compile(r"(thought|source|synthesis|subq)-(\d+)")


class _TopLevel(HTMLParser):
    """Top-level elements of a frame: id, swap instruction, and the rows (li) inside."""

    def __init__(self) -> None:
        super().__init__()
        self.depth = 0
        self.elements: list[dict[str, Any]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if self.depth == 0:
            self.elements.append(
                {"id": values.get("id"), "swap": values.get("hx-swap-oob"), "rows": [], "ids": []}
            )
        else:
            if values.get("id"):
                self.elements[-1]["ids"].append(values["id"])
            found = ROW.fullmatch(values.get("id") or "")
            if tag == "li" and found:
                self.elements[-1]["rows"].append((found[1], int(found[2])))
        if tag not in VOID:
            self.depth += 1

    def handle_endtag(self, tag: str) -> None:
        if tag not in VOID:
            self.depth -= 1


REGIONS = {
    "session-header",
    "live-reasoning",
    "plan",
    "answer",
    "steer",
    "confidence",
    "thought-list",
    "focus-list",
    "scratchpad",
    "scratchpad-summary",
    "scratchpad-list",
    "sources",
    "sources-summary",
    "source-list",
    "sub-questions",
    "subq-tree",
    "synthesis-list",
}


class Page:
    """What a browser shows after applying frames as htmx would."""

    def __init__(self) -> None:
        self.thoughts: list[int] = []  # the stream, in page order
        self.notes: list[int] = []
        self.sources: list[int] = []
        self.questions: list[int] = []
        self.syntheses: list[int] = []
        self.revision = 0
        self.status = ""
        self.ids = set(REGIONS)
        self.replaced: list[str] = []  # the regions swapped whole, in order
        self.errors: list[str] = []
        self.largest = 0
        self.frames = 0

    def marks(self) -> dict[str, int]:
        return {
            "t": max([*self.thoughts, *self.notes], default=-1),
            "y": max(self.syntheses, default=-1),
            "s": max(self.sources, default=0),
            "q": max(self.questions, default=0),
        }

    def _add(self, rows: list[int], number: int, kind: str) -> None:
        if number in rows:
            self.errors.append(f"{kind} {number} shown twice")
        else:
            rows.append(number)

    def apply(self, frame: str) -> None:
        self.frames += 1
        self.largest = max(self.largest, len(frame.encode()))
        header = re.search(r'id="session-header"[^>]*', frame)
        if header:
            self.revision = int(re.search(r'data-revision="(\d+)"', header[0])[1])
            self.status = re.search(r'data-status="(\w+)"', header[0])[1]
        parser = _TopLevel()
        parser.feed(frame)
        for element in parser.elements:
            swap = element["swap"] or "true"
            target = element["id"] if swap == "true" else swap.partition(":#")[2]
            if target not in self.ids:
                self.errors.append(f"no target for {swap!r} ({element['id']})")
                continue
            if swap == "true":
                self.replaced.append(target)
            if swap == "true" and target == "thought-list":
                self.thoughts = []
            for kind, number in element["rows"]:
                if kind == "thought" and target == "scratchpad-list":
                    self._add(self.notes, number, "note")
                elif kind == "thought":
                    self._add(self.thoughts, number, "thought")
                elif kind == "source":
                    self._add(self.sources, number, "source")
                elif kind == "synthesis":
                    self._add(self.syntheses, number, "synthesis")
                elif kind == "subq":
                    self._add(self.questions, number, "sub-question")
            self.ids.update(element["ids"])


async def receive_until(comm: Any, page: Page, done: Any, timeout: float = 30) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        try:
            frame = await comm.receive_from(timeout=max(0.1, deadline - loop.time()))
        except TimeoutError:
            continue
        page.apply(frame)
        if done(frame):
            return
    raise AssertionError("the awaited frame never came")


async def drain(
    comm: Any, page: Page, quiet: float = 0.5, until: Callable[[Page], bool] | None = None
) -> None:
    """Apply frames until `until(page)` holds (if given; a loaded machine can pause longer
    than `quiet` between catch-up frames), then until none comes for `quiet` seconds."""
    while until is not None and not until(page):
        page.apply(await comm.receive_from(timeout=30))
    # receive_nothing, unlike a timed-out receive, leaves the consumer running.
    while not await comm.receive_nothing(timeout=quiet):
        page.apply(await comm.receive_from())
