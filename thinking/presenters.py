"""Template context for the session page. The page view and the live broadcaster both use
it, so a reload shows exactly what the stream showed."""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

from django.db import models
from django.db.models import Count, OuterRef, StringAgg, Subquery, Value
from django.db.models.functions import Cast, Concat
from django.template.loader import render_to_string
from django.utils import timezone

from . import stages, trend
from .forms import SteerForm
from .models import (
    SESSION_KEY,
    CitationCheck,
    Source,
    SourceKind,
    Stage,
    Status,
    SubQuestion,
    Synthesis,
    ThinkingSession,
    Thought,
    ThoughtType,
)
from .row_reads import aggregate, compiled_rows, compiled_values, values_by
from .state import PlanState, PlanStep

# WebSocket routes are not in Django's URLconf; routing.py builds its pattern from this.
WS_SESSIONS = "ws/sessions/"


def session_ws_path(session_id: object) -> str:
    return f"/{WS_SESSIONS}{session_id}/"


# The confidence chart: a plot area with room for the axis labels around it.
CHART_WIDTH = 320
CHART_HEIGHT = 150
CHART_LEFT = 36  # y-axis labels (0%, 50%, 100%)
CHART_RIGHT = 12
CHART_TOP = 10
CHART_BOTTOM = 26  # x-axis labels (thinking time)
CHART_TICKS = (0.0, 0.25, 0.5, 0.75, 1.0)

SPARK_WIDTH = 100
SPARK_HEIGHT = 28
SPARK_PAD = 3


def confidence_points(
    values: list[float],
    *,
    times: list[float] | None = None,
    span: float | None = None,
    width: float = CHART_WIDTH,
    height: float = CHART_HEIGHT,
    left: float = CHART_LEFT,
    right: float = CHART_RIGHT,
    top: float = CHART_TOP,
    bottom: float = CHART_BOTTOM,
) -> list[dict[str, float]]:
    """Chart coordinates for a confidence evolution (0 at the bottom, 1 at the top).

    With `times` (one per value) and `span`, x is the time on a 0..span axis; otherwise the
    values are spread evenly, one step per synthesis.
    """
    if not values:
        return []
    inner_w = width - left - right
    inner_h = height - top - bottom
    timed = times is not None and len(times) == len(values) and bool(span)
    points = []
    for index, value in enumerate(values):
        value = min(1.0, max(0.0, float(value)))
        if timed:
            assert times is not None and span
            share = min(1.0, max(0.0, times[index] / span))
        elif len(values) > 1:
            share = index / (len(values) - 1)
        else:
            share = 0.5
        x = left + share * inner_w
        y = top + (1 - value) * inner_h
        points.append({"x": round(x, 1), "y": round(y, 1), "value": value, "n": index + 1})
    return points


def chart_context(session: ThinkingSession) -> dict[str, Any]:
    """The confidence chart: confidence after each synthesis against thinking time."""
    values = list(session.confidence_evolution)
    times = list(
        session.syntheses.order_by("sequence").values_list("time_offset_seconds", flat=True)
    )
    span = max([session.budget_seconds, *times]) if times else session.budget_seconds
    points = confidence_points(values, times=times, span=span)
    inner_h = CHART_HEIGHT - CHART_TOP - CHART_BOTTOM
    bottom_y = CHART_HEIGHT - CHART_BOTTOM
    polyline = " ".join(f"{p['x']},{p['y']}" for p in points)
    area = ""
    if len(points) > 1:
        area = f"{points[0]['x']},{bottom_y} {polyline} {points[-1]['x']},{bottom_y}"
    first, last = (values[0], values[-1]) if values else (0.0, 0.0)
    return {
        "chart_points": points,
        "chart_polyline": polyline,
        "chart_area": area,
        "chart_width": CHART_WIDTH,
        "chart_height": CHART_HEIGHT,
        "chart_left": CHART_LEFT,
        "chart_right": CHART_WIDTH - CHART_RIGHT,
        "chart_bottom": bottom_y,
        "chart_label_y": CHART_HEIGHT - 8,
        "chart_mid_x": CHART_LEFT + (CHART_WIDTH - CHART_LEFT - CHART_RIGHT) / 2,
        "chart_grid": [
            {"y": round(CHART_TOP + (1 - tick) * inner_h, 1), "label": f"{round(tick * 100)}%"}
            for tick in CHART_TICKS
        ],
        "chart_span": span,
        "chart_trend": _trend(first, last) if len(values) > 1 else "",
        "chart_reading": trend.describe(values),
    }


def _trend(first: float, last: float) -> str:
    points = round((last - first) * 100)
    if not points:
        return "no change since the first"
    word = "up" if points > 0 else "down"
    return f"{word} {abs(points)} point{'s' if abs(points) != 1 else ''} since the first"


def sparkline(values: list[float]) -> dict[str, Any]:
    """A row's small confidence line, on the same 0..1 scale as the big chart."""
    points = confidence_points(
        values,
        width=SPARK_WIDTH,
        height=SPARK_HEIGHT,
        left=SPARK_PAD,
        right=SPARK_PAD,
        top=SPARK_PAD,
        bottom=SPARK_PAD,
    )
    return {
        "points": points,
        "polyline": " ".join(f"{p['x']},{p['y']}" for p in points),
        "width": SPARK_WIDTH,
        "height": SPARK_HEIGHT,
        "mid_y": SPARK_HEIGHT / 2,
        "last": points[-1] if points else None,
    }


TREE_DEPTH = 4  # levels of nesting shown; deeper follow-ups are listed at the last level


def sub_question_tree(questions: list[SubQuestion]) -> list[dict[str, Any]]:
    """Sub-questions as a forest: each one under the sub-question it was asked about.

    Siblings keep the given order (the model's: unexplored first, by priority). A parent
    that is not in the list makes its child a root, so nothing is ever hidden. Exploring a
    follow-up tends to raise follow-ups of its own, so chains grow long over a session: below
    `TREE_DEPTH` levels they are listed flat, in reading order, under their last shown ancestor.
    """
    present = {q.pk for q in questions}
    children: dict[int | None, list[SubQuestion]] = {}
    for q in questions:
        parent = q.parent_id if q.parent_id in present and q.parent_id != q.pk else None
        children.setdefault(parent, []).append(q)

    placed: set[int] = set()

    def descendants(parent: int) -> list[dict[str, Any]]:
        flat: list[dict[str, Any]] = []
        stack = list(reversed(children.get(parent, [])))
        while stack:  # iterative: a chain can be hundreds of questions deep
            q = stack.pop()
            if q.pk in placed:
                continue
            placed.add(q.pk)
            flat.append({"question": q, "children": []})
            stack.extend(reversed(children.get(q.pk, [])))
        return flat

    def grow(parent: int | None, depth: int) -> list[dict[str, Any]]:
        nodes = []
        for q in children.get(parent, []):
            if q.pk in placed:  # a parent cycle cannot recurse forever
                continue
            placed.add(q.pk)
            below = grow(q.pk, depth + 1) if depth < TREE_DEPTH - 1 else descendants(q.pk)
            nodes.append({"question": q, "children": below})
        return nodes

    forest = grow(None, 0)
    # Anything left (only a parent cycle could leave something) shows at the top level.
    forest += [{"question": q, "children": []} for q in questions if q.pk not in placed]
    return forest


def sub_question_slot(question: SubQuestion, parents: Mapping[int, int | None]) -> str:
    """The id of the list a new sub-question joins, where `sub_question_tree` would put it:
    under its parent, or flat under the ancestor at the last nested level."""
    chain: list[int] = []
    parent = question.parent_id
    while parent is not None and parent in parents and parent not in chain:
        chain.append(parent)
        parent = parents[parent]
    if not chain:
        return "subq-tree"
    # chain[0] is the parent, chain[-1] the root (depth 0); the parent's depth is len - 1.
    depth = len(chain) - 1
    slot = chain[0] if depth <= TREE_DEPTH - 1 else chain[len(chain) - TREE_DEPTH]
    return f"subq-children-{slot}"


def _current_step(session: ThinkingSession, steps: list[str]) -> int:
    """The index of the step under way in the plan's checklist: past the last once the
    session completed, -1 while nobody has reported one. A step is done or current only
    when somebody reported it (the model's progress tool) or the session completed; elapsed
    time never moves it."""
    plan: PlanState = session.plan
    if session.status == Status.COMPLETED:
        return len(steps)
    if plan.get("step_reported") or session.progress.get("plan_step"):
        return plan.get("current", 0)
    return -1


def _step_states(steps: Iterable[str], current: int) -> list[PlanStep]:
    return [
        PlanStep(
            text=text,
            state="done" if index < current else "current" if index == current else "todo",
        )
        for index, text in enumerate(steps)
    ]


@functools.lru_cache(maxsize=1024)
def _checklist_html(steps: tuple[str, ...], current: int, heuristic: bool) -> str:
    """The plan's checklist, drawn once per plan and step reached: the plan region is re-sent
    on every stage a session enters (half of a cycle's live updates), and its checklist (a
    loop of conditions per step) changes only when a step is reported or the session
    completes (bench/README, "A stage entered: the plan region from one statement")."""
    context = {"plan_steps": _step_states(steps, current), "heuristic": heuristic}
    return render_to_string("thinking/_plan_steps.html", context)


def _checklist(session: ThinkingSession) -> str:
    plan: PlanState = session.plan
    steps = plan.get("steps") or []
    if not steps:
        return ""
    # As text: the template draws each step's text as a string; the key must be hashable.
    texts = tuple(str(text) for text in steps)
    return _checklist_html(texts, _current_step(session, steps), plan.get("source") == "heuristic")


STAGES_SHOWN = 20  # the plan region shows the newest stages only, so it never grows


def _stage_line(item: Any) -> dict[str, Any]:
    """A stage entry with every key the stage line reads. Optional keys are absent from most
    entries, and each absent key a template looks up fails the slow way (exceptions and a
    `dir()`): ~120 of them in a plan region of 21 lines (bench/README, "The plan region")."""
    return {
        "stage": "",
        "label": "",
        "message": "",
        "by": "",
        "plan_step": None,
        "total_steps": None,
        "confidence": "",
        "metadata": None,
        **(item if isinstance(item, dict) else {}),
    }


def _newest_stages() -> models.QuerySet:
    # The entries as stored text: the key of their drawn lines (`_stage_html`).
    rows = Stage.objects.filter(session_id=SESSION_KEY).order_by("-sequence")
    return rows.values_list("sequence", Cast("entry", models.TextField()))[:STAGES_SHOWN]


@functools.lru_cache(maxsize=4096)
def _stage_html(stored: str, tag: str = "li") -> str:
    """One line of the stage history (`tag` "li"), or the latest stage under the checklist
    ("p"), drawn from its stored entry. An entry never changes once recorded and its line
    depends on nothing else, so each is drawn once per process: the plan region is re-sent
    on every stage a session enters, and its twenty lines were most of its cost
    (bench/README, "Stage lines drawn once")."""
    item = json.loads(stored)
    return render_to_string("thinking/_stage.html", {"item": _stage_line(item), "tag": tag})


# Between the stage items of `_planned_read`: a control character is never raw in JSON text.
_STAGE_ITEMS = "\x1e"


def _planned_read() -> models.QuerySet:
    """The session's row with its newest stages as `_newest_stages` reads them, as one text
    of "sequence:entry" items in no order (an annotation, `stage_items`). From one statement,
    the row's stage count is its newest stage's number, so the newest are those above it
    less STAGES_SHOWN (a session's numbers have no gaps: the oldest are pruned first)."""
    session = OuterRef("pk")
    item = Concat(
        Cast("sequence", models.TextField()), Value(":"), Cast("entry", models.TextField()),
        output_field=models.TextField(),
    )  # fmt: skip
    newest = Stage.objects.filter(
        session_id=session, sequence__gt=OuterRef("stage_count") - STAGES_SHOWN
    ).order_by()
    joined = newest.values("session_id").annotate(text=StringAgg(item, Value(_STAGE_ITEMS)))
    rows = ThinkingSession.objects.filter(pk=SESSION_KEY).order_by()
    return rows.annotate(stage_items=Subquery(joined.values("text")))


Stages = list[tuple[int, str]]  # a session's newest stages, newest first: (number, entry's text)


def read_planned_session(session_id: uuid.UUID) -> tuple[ThinkingSession, Stages]:
    """The session's row and its newest stages, in one statement (compiled once per
    connection): a stage entered (half of a cycle's live updates) draws the plan region
    from them, and a render process waits out each statement it runs. Raises
    `ThinkingSession.DoesNotExist` for a deleted session, as its row's read does."""
    session, annotated = _annotated_session("live:session+stages", _planned_read, session_id)
    text = annotated["stage_items"]
    items = (item.partition(":") for item in text.split(_STAGE_ITEMS)) if text else ()
    return session, sorted(((int(number), entry) for number, _, entry in items), reverse=True)


def plan_context(session: ThinkingSession, newest: Stages | None = None) -> dict[str, Any]:
    """The plan region: the checklist, the latest stage, and the newest stages before it
    (`newest`, when read with the session's row: `read_planned_session`; else a compiled
    read here: it is drawn on every stage a session enters)."""
    if newest is None:
        newest = compiled_values("plan:stages", _newest_stages, session=session.pk)
    # The count and the latest stage come from the same read as the lines: the session row,
    # read before, may be a stage behind them. The newest entry's number is the count, and
    # the entry is the session's progress (stages.record keeps both).
    if newest:
        (count, latest), progress = newest[0], json.loads(newest[0][1])
    else:
        count, progress = session.stage_count, session.progress
        latest = json.dumps(progress) if progress.get("message") else ""
    return {
        "checklist": _checklist(session),
        "progress_line": _stage_html(latest, "p") if progress.get("message") else None,
        "stage_count": count,
        "stage_history": [_stage_html(entry) for (_, entry) in newest],
        "stages_shown": STAGES_SHOWN,
        "stages_kept": stages.MAX_STAGES,
    }


THOUGHT_PAGE = 50  # thoughts a page shows at first and per "Show earlier": the DOM stays small
NOTE_PAGE = 50  # scratchpad notes shown (the newest)


class SourceNumbers(AbstractSet[int]):
    """The numbers of a session's sources: a citation [n] links when n is one of them.

    Sources are numbered 1, 2, 3, ... as they are found, so the set is all of 1..top unless
    one was deleted (in the admin). Reading every number into a set on each live update
    grew with the session (~800 sources in a long one); this answers `in` from the count
    and the highest number, and holds the numbers themselves only when there is a gap."""

    __slots__ = ("_present", "top")

    def __init__(self, top: int, present: frozenset[int] | None = None) -> None:
        self.top = top  # the highest number (0: none yet)
        self._present = present  # None: every number from 1 to top

    def __contains__(self, number: object) -> bool:
        if self._present is not None:
            return number in self._present
        return isinstance(number, int) and 1 <= number <= self.top

    def __iter__(self) -> Iterator[int]:
        return iter(sorted(self._present) if self._present is not None else range(1, self.top + 1))

    def __len__(self) -> int:
        return len(self._present) if self._present is not None else self.top

    @classmethod
    def _from_iterable[S](cls, numbers: Iterable[S], /) -> frozenset[S]:
        # What the inherited set operations (|, &, -) build their results with.
        return frozenset(numbers)


def source_numbers(session: ThinkingSession, tallies: Tallies | None = None) -> SourceNumbers:
    """From the sources' count and their lowest and highest numbers (`tallies`, else read
    here, alone); the numbers themselves only after a deletion. The numbers are distinct (a
    constraint), so `count` of them from 1 up to `count` are all of 1..count."""
    if tallies is None:
        tally = compiled_values("sources:tally", _sources_read, session=session.pk)
        count, low, top = _sources_tally(*tally[0]) if tally else (0, 1, 0)
    else:
        count, low, top = tallies.sources
    if count == top and low >= 1:
        return SourceNumbers(top)
    present = frozenset(n for (n,) in values_by(Source, "session_id", session.pk, "number"))
    return SourceNumbers(max(present, default=0), present)


def _sources_by_kind() -> models.QuerySet:
    rows = Source.objects.filter(session_id=SESSION_KEY).order_by().values("kind")
    return rows.annotate(n=Count("pk")).values_list("kind", "n")


def sources_summary_context(session: ThinkingSession) -> dict[str, Any]:
    """The sources' summary line (a compiled read: drawn on every live update with new
    sources)."""
    counts = dict(compiled_values("sources:kinds", _sources_by_kind, session=session.pk))
    web, memory = counts.get(SourceKind.WEB, 0), counts.get(SourceKind.MEMORY, 0)
    return {
        "session": session,
        "source_count": web + memory,
        "web_count": web,
        "memory_count": memory,
    }


def sources_context(session: ThinkingSession) -> dict[str, Any]:
    sources = list(session.sources.all())
    return {
        **sources_summary_context(session),
        "sources": sources,
        "source_numbers": {s.number for s in sources},
    }


def thought_rows(thoughts: list[Thought], previous: Thought | None = None) -> list[dict[str, Any]]:
    """Thoughts in order, each knowing whether it opens its cycle (the cycle's parts show
    once, under its first thought). `previous` is the thought just before the first one."""
    rows = []
    cycle = previous.cycle if previous is not None else None
    for thought in thoughts:
        rows.append({"thought": thought, "show_parts": thought.cycle != cycle})
        cycle = thought.cycle
    return rows


def _visible(session: ThinkingSession) -> Any:
    return session.thoughts.exclude(type=ThoughtType.SCRATCHPAD).select_related("sub_question")


def thought_page(
    session: ThinkingSession, *, before: int | None = None, after: int | None = None
) -> dict[str, Any]:
    """A page of the thought stream: the newest THOUGHT_PAGE before `before` (or all after
    `after`, oldest first), and where "Show earlier" continues from."""
    rows = _visible(session)
    if after is not None:
        chosen = list(rows.filter(sequence__gt=after).order_by("sequence"))
    else:
        if before is not None:
            rows = rows.filter(sequence__lt=before)
        chosen = list(reversed(rows.order_by("-sequence")[:THOUGHT_PAGE]))
    first = chosen[0].sequence if chosen else before
    previous = None
    earlier = 0
    if first is not None:
        earlier = _visible(session).filter(sequence__lt=first).count()
        previous = _visible(session).filter(sequence__lt=first).order_by("-sequence").first()
    return {
        "thought_rows": thought_rows(chosen, previous),
        "earlier_count": earlier,
        "earlier_before": first,
        "thought_page_size": min(THOUGHT_PAGE, earlier),
    }


def focus_thoughts(session: ThinkingSession, focus: int) -> dict[str, Any]:
    """Every thought on one sub-question, for the stream filter (not only the loaded page)."""
    rows = list(_visible(session).filter(sub_question_id=focus).order_by("sequence"))
    return {"thought_rows": thought_rows(rows), "copy": True}


def notes_context(session: ThinkingSession) -> dict[str, Any]:
    notes = session.thoughts.filter(type=ThoughtType.SCRATCHPAD)
    shown = list(reversed(notes.order_by("-sequence")[:NOTE_PAGE]))
    return {
        "scratchpad": shown,
        "note_count": notes.count(),
        "note_shown": len(shown),
        "note_page": NOTE_PAGE,  # the page keeps this many as live notes arrive (app.js)
    }


def notes_summary_context(session: ThinkingSession) -> dict[str, Any]:
    """The scratchpad's summary line alone (what a live update sends): one count, not the
    newest page of notes."""
    count = session.thoughts.filter(type=ThoughtType.SCRATCHPAD).count()
    return {"note_count": count, "note_shown": min(count, NOTE_PAGE)}


def question_states(session: Any) -> models.QuerySet:
    """Every sub-question's state of the session `session` names (a `Param`, an `OuterRef`)
    as one text of "pk:explored:priority" items (explored 0 or 1), joined by ";" in no
    order: a row's state is what follows its pk, what its row shows that can change
    (explored, and its priority, re-ranked). A session's hundreds of rows cost one value
    to fetch (every live update on sub-questions reads them all)."""
    state = Concat(
        Cast("pk", models.TextField()), Value(":"), Cast("explored", models.IntegerField()),
        Value(":"), Cast("priority", models.TextField()), output_field=models.TextField(),
    )  # fmt: skip
    rows = SubQuestion.objects.filter(session_id=session).order_by().values("session_id")
    return rows.annotate(text=StringAgg(state, Value(";"))).values("text")


@dataclass(frozen=True)
class Tallies:
    """What a full live update counts, read with the session's row (`read_tallied_session`)."""

    counts: dict[str, int]  # the header's: thoughts, sub-questions, syntheses, verdicts by kind
    sources: tuple[int, int, int]  # the sources' count, lowest and highest number (1, 0: none)
    states: list[str] | None = None  # every sub-question's "pk:state" item, when asked for


@functools.cache
def _marks() -> tuple[str, ...]:
    from .citations import MARKS  # citations imports the live stream, which imports this

    return tuple(MARKS)


COUNTED = {"thoughts": Thought, "sub_questions": SubQuestion, "syntheses": Synthesis}


@functools.cache
def _counted() -> tuple[str, ...]:
    """The header's counts by name: rows (`COUNTED`), then citation verdicts by kind."""
    return (*COUNTED, *_marks())


def _session_read(states: bool) -> models.QuerySet:
    """The session's row with its tallies as annotations, each a subquery named `n_` and
    what it counts (apart from the model's reverse relations): the header's counts
    (`_counted`), the sources' count and lowest and highest number, and, if asked for,
    every sub-question's state."""
    session = OuterRef("pk")
    checks = CitationCheck.objects.filter(synthesis__session_id=session)
    sources = Source.objects.filter(session_id=session)
    columns = {
        # (a keyword spread: the type checker cannot resolve a field on a model variable)
        f"n_{name}": aggregate(model._default_manager.filter(**{"session_id": session}), "COUNT")
        for name, model in COUNTED.items()
    }
    columns |= {f"n_{mark}": aggregate(checks.filter(verdict=mark), "COUNT") for mark in _marks()}
    columns |= {
        "n_sources": aggregate(sources, "COUNT"),
        "n_sources_low": aggregate(sources, "MIN", "number"),
        "n_sources_top": aggregate(sources, "MAX", "number"),
    }
    if states:
        columns["n_states"] = Subquery(question_states(session))
    return ThinkingSession.objects.filter(pk=SESSION_KEY).order_by().annotate(**columns)


# Some of the tallies alone: the subqueries not selected are left out of the SQL.
def _counts_read() -> models.QuerySet:
    return _session_read(False).values_list(*(f"n_{name}" for name in _counted()))


_SOURCES = ("n_sources", "n_sources_low", "n_sources_top")


def _sources_read() -> models.QuerySet:
    return _session_read(False).values_list(*_SOURCES)


def _sources_tally(count: int, low: int | None, top: int | None) -> tuple[int, int, int]:
    """The sources' count, lowest and highest number (1 and 0 when there are none)."""
    return count, 1 if low is None else low, top or 0


# Each a compiled read's name and its one query (a name is refused another query).
_SESSION_TALLIED = {
    states: (f"live:session{'+states' * states}", functools.partial(_session_read, states))
    for states in (False, True)
}


def _annotated_session(
    kind: str, build: Callable[[], models.QuerySet], session_id: uuid.UUID
) -> tuple[ThinkingSession, dict[str, Any]]:
    """A compiled read of the session's row with annotations: the row, and its attributes
    (the annotations among them, set on the instance as the ORM sets them). Raises
    `ThinkingSession.DoesNotExist` for a deleted session, as its row's read does."""
    found = compiled_rows(kind, build, session=session_id)
    if not found:
        raise ThinkingSession.DoesNotExist(f"No session {session_id}.")
    (session,) = found
    return session, vars(session)


def read_tallied_session(
    session_id: uuid.UUID, *, states: bool = False
) -> tuple[ThinkingSession, Tallies]:
    """The session's row with the header's counts, the sources' tally and, if asked, every
    sub-question's state, in one statement (compiled once per connection): a full live
    update read them in four, each a round trip a render process waits out (bench/README.md,
    "A live update's counts in one read", "A thought cycle's update in two reads"). Raises
    `ThinkingSession.DoesNotExist` for a deleted session, as its row's read does."""
    kind, build = _SESSION_TALLIED[states]
    session, tallied = _annotated_session(kind, build, session_id)
    text = tallied.get("n_states")
    return session, Tallies(
        counts={name: tallied[f"n_{name}"] for name in _counted()},
        sources=_sources_tally(*(tallied[name] for name in _SOURCES)),
        states=(text.split(";") if text else []) if states else None,
    )


def header_counts(session: ThinkingSession) -> dict[str, int]:
    """The header's counts (thoughts, sub-questions, syntheses, and citation verdicts by kind,
    zeros included), in one read (the live update's, without the rest). Raises
    `ThinkingSession.DoesNotExist` for a session deleted since its row was read."""
    found = compiled_values("header:counts", _counts_read, session=session.pk)
    if not found:
        raise ThinkingSession.DoesNotExist(f"No session {session.pk}.")
    return dict(zip(_counted(), found[0], strict=True))


def header_context(
    session: ThinkingSession, viewer: object, counts: dict[str, int] | None = None
) -> dict[str, Any]:
    """The header for one viewer: only the owner is offered Cancel. `counts`: the header's
    counts, when the caller read them (`read_tallied_session`).

    The clock's figures are worked out once, at one instant, and its data attributes are
    formatted here: plain numbers for the page's clock script, never localized, and no
    template filter on a path that runs on every step."""
    now = timezone.now()
    stops = session.clock_stops_at()
    tick_for = (stops - now).total_seconds() if stops else None
    elapsed = session.elapsed_seconds(now)
    progress = session.progress_percent(now)
    cost = session.estimated_cost
    return {
        "session": session,
        "counts": header_counts(session) if counts is None else counts,
        "user": viewer,
        "viewer_owns": session.is_owned_by(viewer),
        "clock_ticking": session.status == Status.THINKING
        and session.running_since is not None
        and session.waiting_since is None
        and (tick_for is None or tick_for > 0),
        "clock": {
            "elapsed": elapsed,
            "remaining": session.remaining_seconds(now),
            "data_elapsed": f"{elapsed:.1f}",
            "data_budget": f"{session.budget_seconds:.1f}",
            "data_tick_for": f"{max(0.0, tick_for) if tick_for is not None else 86400.0:.1f}",
            "percent": f"{progress:.0f}",
            "bar_width": f"{progress:.1f}",
        },
        "cost": None if cost is None else f"{cost:.4f}",
    }


def steer_context(session: ThinkingSession, form: SteerForm | None = None) -> dict[str, Any]:
    return {"session": session, "steer_form": form or SteerForm()}


def session_context(session: ThinkingSession, viewer: object = None) -> dict[str, Any]:
    """Everything the session page's partials need; each part comes from the same function
    the live broadcaster uses for it."""
    return {
        "session": session,
        "ws_path": session_ws_path(session.pk),
        **thought_page(session),
        **notes_context(session),
        "sub_questions": list(session.sub_questions.all()),
        "syntheses": list(session.syntheses.all()),
        **plan_context(session),
        **steer_context(session),
        **sources_context(session),
        **chart_context(session),
        **header_context(session, viewer),
    }
