"""Template context for the session page. The page view and the live broadcaster both use
it, so a reload shows exactly what the stream showed."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

from django.db import connection, models
from django.db.models import Count, Max, Q
from django.utils import timezone

from research import providers
from thinking.deliberation import stages
from thinking.models import (
    CitationCheck,
    SearchRecency,
    Source,
    SourceKind,
    Status,
    SubQuestion,
    Synthesis,
    ThinkingSession,
    Thought,
    ThoughtType,
    Verdict,
)
from thinking.page import trend
from thinking.state import PlanState, PlanStep
from thinking.web.forms import SteerForm

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


STAGES_SHOWN = 20  # the plan region shows the newest stages only, so it never grows


def plan_context(session: ThinkingSession) -> dict[str, Any]:
    """The plan region: the checklist, the latest stage, and the newest stages before it.

    The count and the latest stage come from the same read as the lines: the session row,
    read before, may be a stage behind them. The newest entry's number is the count, and
    the entry is the session's progress (stages.record keeps both)."""
    entries = session.stage_entries.order_by("-sequence").values_list("sequence", "entry")
    newest = list(entries[:STAGES_SHOWN])
    count, progress = newest[0] if newest else (session.stage_count, session.progress)
    plan: PlanState = session.plan
    steps = [str(text) for text in plan.get("steps") or []]
    return {
        "plan_steps": _step_states(steps, _current_step(session, steps)),
        "heuristic": plan.get("source") == "heuristic",
        "progress": progress if progress.get("message") else None,
        "stage_count": count,
        "stage_history": [entry for _, entry in newest],
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


def source_numbers(session: ThinkingSession, counts: Tally | None = None) -> SourceNumbers:
    """From the sources' count and their lowest and highest number (`tally`, or the `counts`
    already read); the numbers themselves only after a deletion. The numbers are distinct (a
    constraint), so `count` of them from 1 up to `count` are all of 1..count."""
    counts = counts or tally(session.pk)
    count, low, top = counts.sources, counts.lowest_source, counts.highest_source
    if count == top and (low is None or low >= 1):
        return SourceNumbers(top)
    present = frozenset(session.sources.values_list("number", flat=True))
    return SourceNumbers(max(present, default=0), present)


def sources_summary_context(session: ThinkingSession) -> dict[str, Any]:
    """The sources' summary line: how many, by kind."""
    by_kind = session.sources.order_by().values_list("kind").annotate(Count("pk"))
    counts = dict(by_kind)
    web, memory = counts.get(SourceKind.WEB, 0), counts.get(SourceKind.MEMORY, 0)
    return {
        "session": session,
        "source_count": web + memory,
        "web_count": web,
        "memory_count": memory,
    }


SOURCE_TOP = 20  # sources a page shows at first: the most cited
SOURCE_PAGE = 100  # sources per page of "Show all", by number
SUB_QUESTION_TOP = 40  # sub-questions a page shows at first: the first by the model's order
SUB_QUESTION_PAGE = 100  # sub-questions per page of "Show all", in the order they were asked
SYNTHESIS_TOP = 10  # syntheses a page shows: the newest (older ones load on demand)


def most_cited(session: ThinkingSession, limit: int = SOURCE_TOP) -> list[Source]:
    """The sources the checked citations name most often (ties: the first found), topped up
    with the first found: one grouped count, and one read of at most 2 * `limit` rows."""
    checks = CitationCheck.objects.filter(synthesis__session_id=session.pk).order_by()
    counted = checks.values_list("number").annotate(n=Count("pk")).order_by("-n", "number")
    numbers = [number for number, _ in counted[:limit]]
    first = session.sources.order_by("number").values_list("number", flat=True)[:limit]
    rows = session.sources.filter(Q(number__in=numbers) | Q(number__in=first))
    order = {number: index for index, number in enumerate(numbers)}
    ranked = sorted(rows, key=lambda s: (order.get(s.number, limit), s.number))
    return ranked[:limit]


def sources_context(session: ThinkingSession) -> dict[str, Any]:
    """The sources card: the summary, the most cited, and the highest number the page knows
    of (new ones arrive live after it; all of them are one request away)."""
    numbers = source_numbers(session)
    return {
        **sources_summary_context(session),
        "sources": most_cited(session),
        "source_numbers": numbers,
        "source_top": numbers.top,
    }


def source_page(session: ThinkingSession, after: int = 0) -> dict[str, Any]:
    """A page of "Show all sources": the next SOURCE_PAGE by number after `after` (keyset on
    the (session, number) index), and where the next page starts."""
    rows = list(session.sources.filter(number__gt=after).order_by("number")[: SOURCE_PAGE + 1])
    more = len(rows) > SOURCE_PAGE
    rows = rows[:SOURCE_PAGE]
    return {
        "sources": rows,
        "copy": True,
        "next_after": rows[-1].number if more else None,
    }


def sub_questions_context(session: ThinkingSession) -> dict[str, Any]:
    """The sub-question card: the first SUB_QUESTION_TOP in the model's order (unexplored
    first, by priority) as a tree, how many there are, and the highest id the page knows."""
    rows = session.sub_questions.all()
    found = rows.order_by().aggregate(count=Count("pk"), top=Max("pk"))
    return {
        "sub_questions": list(rows[:SUB_QUESTION_TOP]),
        "sub_question_count": found["count"],
        "sub_question_top": found["top"] or 0,
    }


def sub_question_page(session: ThinkingSession, after: int = 0) -> dict[str, Any]:
    """A page of "Show all sub-questions": the next SUB_QUESTION_PAGE in the order they were
    asked (keyset on the primary key), as a flat list of copies."""
    rows = list(session.sub_questions.filter(pk__gt=after).order_by("pk")[: SUB_QUESTION_PAGE + 1])
    more = len(rows) > SUB_QUESTION_PAGE
    rows = rows[:SUB_QUESTION_PAGE]
    return {
        "nodes": [{"question": q, "children": []} for q in rows],
        "copy": True,
        "next_after": rows[-1].pk if more else None,
    }


def syntheses_context(session: ThinkingSession, before: int | None = None) -> dict[str, Any]:
    """The newest SYNTHESIS_TOP syntheses before `before` (all when None), oldest first, and
    how many come before them (keyset on the (session, sequence) index)."""
    rows = session.syntheses.all()
    if before is not None:
        rows = rows.filter(sequence__lt=before)
    shown = list(rows.order_by("-sequence").prefetch_related("citation_checks")[:SYNTHESIS_TOP])
    shown.reverse()
    first = shown[0].sequence if shown else before
    earlier = session.syntheses.filter(sequence__lt=first).count() if first is not None else 0
    return {"syntheses": shown, "synthesis_earlier": earlier, "synthesis_before": first}


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


def _newest_page(rows: Any, before: int | None) -> dict[str, Any]:
    """The newest THOUGHT_PAGE of `rows` before `before` (keyset on the sequence), and where
    "Show earlier" continues from. One row more is read: the thought before the page, whose
    cycle says whether the page's first thought shows its parts."""
    page = rows if before is None else rows.filter(sequence__lt=before)
    newest = list(page.order_by("-sequence")[: THOUGHT_PAGE + 1])
    previous = newest.pop() if len(newest) > THOUGHT_PAGE else None
    chosen = newest[::-1]
    first = chosen[0].sequence if chosen else before
    # Counted at any length (0 when the page starts the stream), so a page costs the same.
    earlier = rows.filter(sequence__lt=first).count() if first is not None else 0
    return {
        "thought_rows": thought_rows(chosen, previous),
        "earlier_count": earlier,
        "earlier_before": first,
        "thought_page_size": min(THOUGHT_PAGE, earlier),
    }


def thought_page(session: ThinkingSession, *, before: int | None = None) -> dict[str, Any]:
    """A page of the thought stream: the newest THOUGHT_PAGE before `before`, and where
    "Show earlier" continues from."""
    return _newest_page(_visible(session), before)


def focus_thoughts(
    session: ThinkingSession, focus: int, *, before: int | None = None
) -> dict[str, Any]:
    """A page of the thoughts on one sub-question, for the stream filter (keyset on the
    sub-question's sequence index), as copies (no ids), with its own "Show earlier"."""
    rows = _visible(session).filter(sub_question_id=focus)
    return {**_newest_page(rows, before), "copy": True, "focus": focus}


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


@dataclass(frozen=True)
class Tally:
    """What the header and the citation links count of a session, read in one statement."""

    thoughts: int
    sub_questions: int
    syntheses: int
    sources: int
    lowest_source: int | None
    highest_source: int
    verdicts: dict[str, int]


def _column(model: type[models.Model], name: str) -> str:
    """A model field's column, quoted with its table: "table"."column"."""
    field = model._meta.get_field(name)
    assert isinstance(field, models.Field) and field.column
    quote = connection.ops.quote_name
    return f"{quote(model._meta.db_table)}.{quote(field.column)}"


@functools.cache
def _tally_sql() -> str:
    """One SELECT of scalar counts, each on the session's index of its table. A live update
    needs all of them; as separate ORM queries, building them cost more than running them."""
    quote = connection.ops.quote_name

    def rows(model: type[models.Model]) -> str:
        return f"FROM {quote(model._meta.db_table)} WHERE {_column(model, 'session')} = %s"

    checks = (
        f"FROM {quote(CitationCheck._meta.db_table)} JOIN {quote(Synthesis._meta.db_table)} "
        f"ON {_column(Synthesis, 'id')} = {_column(CitationCheck, 'synthesis')} "
        f"WHERE {_column(Synthesis, 'session')} = %s AND {_column(CitationCheck, 'verdict')} = %s"
    )
    number = _column(Source, "number")
    counts = [
        f"(SELECT COUNT(*) {rows(Thought)})",
        f"(SELECT COUNT(*) {rows(SubQuestion)})",
        f"(SELECT COUNT(*) {rows(Synthesis)})",
        f"(SELECT COUNT(*) {rows(Source)})",
        f"(SELECT MIN({number}) {rows(Source)})",
        f"(SELECT MAX({number}) {rows(Source)})",
        *(f"(SELECT COUNT(*) {checks})" for _ in Verdict.values),
    ]
    return "SELECT " + ", ".join(counts)


def tally(session_id: object) -> Tally:
    """The session's counts (`Tally`), in one statement (raw SQL: Django's documented
    `connection.cursor()`; the statement is built once from the models' tables)."""
    key = ThinkingSession._meta.pk.get_db_prep_value(session_id, connection)
    params: list[Any] = [key] * 6
    for verdict in Verdict.values:
        params += [key, verdict]
    with connection.cursor() as cursor:
        cursor.execute(_tally_sql(), params)
        row = cursor.fetchone()
    thoughts, questions, syntheses, sources, low, top, *verdicts = row
    return Tally(
        thoughts=thoughts,
        sub_questions=questions,
        syntheses=syntheses,
        sources=sources,
        lowest_source=low,
        highest_source=top or 0,
        verdicts=dict(zip(Verdict.values, verdicts, strict=True)),
    )


def header_counts(session: ThinkingSession, counts: Tally | None = None) -> dict[str, int]:
    """The header's counts: thoughts, sub-questions, syntheses, and citation verdicts by
    kind, zeros included (from `tally`, or the `counts` already read)."""
    counts = counts or tally(session.pk)
    return {
        "thoughts": counts.thoughts,
        "sub_questions": counts.sub_questions,
        "syntheses": counts.syntheses,
        **counts.verdicts,
    }


def header_context(
    session: ThinkingSession, viewer: object, counts: Tally | None = None
) -> dict[str, Any]:
    """The header for one viewer: only the owner is offered Cancel.

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
        "counts": header_counts(session, counts),
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


def research_settings(session: ThinkingSession) -> str:
    """How the session researches, in words, for the plan card (drawn with the page only:
    the settings never change while it runs): the search engines, the domain lists, the
    recency window and the language it answers in."""
    if not session.research_enabled:
        parts = ["Research off"]
    elif not session.web_enabled:
        parts = ["The knowledge base only, no web search"]
    else:
        names = session.web_search or providers.default_names()
        engines = ", ".join(
            providers.PROVIDERS[name].label for name in names if name in providers.PROVIDERS
        )
        parts = [f"Web search: {engines or 'none set up here'}"]
        if session.include_domains:
            parts.append("only " + ", ".join(session.include_domains))
        if session.exclude_domains:
            parts.append("not " + ", ".join(session.exclude_domains))
        if session.search_recency:
            parts.append(SearchRecency(session.search_recency).label.lower())
    parts.append(f"answers in {session.language}" if session.language else "")
    return " · ".join(part for part in parts if part)


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
        **sub_questions_context(session),
        **syntheses_context(session),
        **plan_context(session),
        "research_settings": research_settings(session),
        **steer_context(session),
        **sources_context(session),
        **chart_context(session),
        **header_context(session, viewer),
    }
