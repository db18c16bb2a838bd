"""Template context for the session page. The page view and the live broadcaster both use
it, so a reload shows exactly what the stream showed."""

from __future__ import annotations

from typing import Any

from .forms import SteerForm
from .models import SourceKind, Status, ThinkingSession, ThoughtType

# WebSocket routes are not in Django's URLconf; routing.py builds its pattern from this.
WS_SESSIONS = "ws/sessions/"


def session_ws_path(session_id: object) -> str:
    return f"/{WS_SESSIONS}{session_id}/"


CHART_WIDTH = 320
CHART_HEIGHT = 90
CHART_PAD = 6


def confidence_points(values: list[float]) -> list[dict[str, float]]:
    """Chart coordinates for a confidence evolution (0 at the bottom, 1 at the top)."""
    if not values:
        return []
    inner_w = CHART_WIDTH - 2 * CHART_PAD
    inner_h = CHART_HEIGHT - 2 * CHART_PAD
    step = inner_w / (len(values) - 1) if len(values) > 1 else 0
    points = []
    for index, value in enumerate(values):
        value = min(1.0, max(0.0, float(value)))
        x = CHART_PAD + (index * step if len(values) > 1 else inner_w / 2)
        y = CHART_PAD + (1 - value) * inner_h
        points.append({"x": round(x, 1), "y": round(y, 1), "value": value, "n": index + 1})
    return points


def chart_context(session: ThinkingSession) -> dict[str, Any]:
    points = confidence_points(session.confidence_evolution)
    return {
        "chart_points": points,
        "chart_polyline": " ".join(f"{p['x']},{p['y']}" for p in points),
        "chart_width": CHART_WIDTH,
        "chart_height": CHART_HEIGHT,
        "chart_mid_y": CHART_PAD + (CHART_HEIGHT - 2 * CHART_PAD) / 2,
    }


def plan_steps(session: ThinkingSession) -> list[dict[str, Any]]:
    """The plan as a checklist. The current step is the one the model last reported with the
    progress tool, else estimated from the time used."""
    steps = session.plan.get("steps") or []
    if not steps:
        return []
    if session.status == Status.COMPLETED:
        current = len(steps)
    elif session.progress.get("plan_step"):
        current = session.plan.get("current", 0)
    else:
        estimated = int(session.progress_percent() / 100 * len(steps))
        current = max(session.plan.get("current", 0), min(estimated, len(steps) - 1))
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
