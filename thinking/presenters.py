"""Template context for the session page. The page view and the live broadcaster both use
it, so a reload shows exactly what the stream showed."""

from __future__ import annotations

from typing import Any

from . import trend
from .forms import SteerForm
from .models import SourceKind, Status, SubQuestion, ThinkingSession, ThoughtType

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


def plan_steps(session: ThinkingSession) -> list[dict[str, Any]]:
    """The plan as a checklist. A step is done or current only when somebody reported it (the
    model's progress tool) or the session completed; elapsed time never moves it."""
    steps = session.plan.get("steps") or []
    if not steps:
        return []
    if session.status == Status.COMPLETED:
        current = len(steps)
    elif session.plan.get("step_reported") or session.progress.get("plan_step"):
        current = session.plan.get("current", 0)
    else:
        current = -1  # nothing reported yet: every step is still to do
    return [
        {
            "text": text,
            "state": "done" if index < current else "current" if index == current else "todo",
        }
        for index, text in enumerate(steps)
    ]


def sources_context(session: ThinkingSession) -> dict[str, Any]:
    sources = list(session.sources.all())
    return {
        "sources": sources,
        "source_numbers": {s.number for s in sources},
        "web_count": sum(1 for s in sources if s.kind == SourceKind.WEB),
        "memory_count": sum(1 for s in sources if s.kind == SourceKind.MEMORY),
    }


def session_context(session: ThinkingSession) -> dict[str, Any]:
    """Everything the session page's partials need."""
    thoughts = list(session.thoughts.select_related("sub_question"))
    return {
        "session": session,
        "ws_path": session_ws_path(session.pk),
        "thoughts": [t for t in thoughts if t.type != ThoughtType.SCRATCHPAD],
        "scratchpad": [t for t in thoughts if t.type == ThoughtType.SCRATCHPAD],
        "sub_questions": list(session.sub_questions.all()),
        "syntheses": list(session.syntheses.all()),
        "plan_steps": plan_steps(session),
        "steer_form": SteerForm(),
        **sources_context(session),
        **chart_context(session),
    }
