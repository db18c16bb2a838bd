"""Render partials for the live stream and send them to the session's group.

The only module that turns loop events into HTML. Each message carries the parts separately,
tagged with the sequence of the row they show, so a consumer can drop what its page already
has (after a catch-up) and never shows a row twice.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.template.loader import render_to_string

from .events import SessionEvent
from .hops import db_hop
from .models import ThinkingSession, ThoughtType
from .presenters import chart_context, plan_steps, session_context, sources_context


def group_name(session_id: uuid.UUID | str) -> str:
    return f"session-{session_id}"


def _render(template: str, context: dict[str, Any]) -> str:
    return render_to_string(f"thinking/{template}", context)


LIVE_LABELS = {
    "thoughts": "new thoughts",
    "questions": "new sub-questions",
    "synthesis": "a synthesis",
    "final": "the final answer",
}
LIVE_TEXT_CHARS = 4000  # the tail of the reasoning so far: enough to follow, small to send


def render_live(event: SessionEvent) -> dict[str, Any]:
    """A step in flight: only the live panel changes."""
    live = event.live
    assert live is not None
    shown = replace(live, reasoning=live.reasoning[-LIVE_TEXT_CHARS:])
    context = {"live": shown, "live_label": LIVE_LABELS.get(live.purpose, ""), "oob": True}
    html = _render("_live.html", context)
    return {"type": "session.update", "parts": [{"kind": "replace", "html": html}]}


def render_event(event: SessionEvent) -> dict[str, Any]:
    """The group message for one event: replaced regions and appended rows."""
    if event.live is not None:
        return render_live(event)
    session = ThinkingSession.objects.get(pk=event.session_id)
    sources = sources_context(session)
    base = {"session": session, "oob": True, "source_numbers": sources["source_numbers"]}
    parts: list[dict[str, Any]] = [
        {"kind": "replace", "html": _render("_header.html", base)},
    ]
    thoughts = (
        session.thoughts.filter(sequence__in=event.thoughts)
        .select_related("sub_question")
        .order_by("sequence")
    )
    visible = [t for t in thoughts if t.type != ThoughtType.SCRATCHPAD]
    for index, thought in enumerate(visible):
        # One event is one cycle: its parts show once, under its first thought.
        context = {
            **base,
            "thought": thought,
            "append_to": "thought-list",
            "show_parts": index == 0,
        }
        context.pop("oob")
        html = _render("_thought.html", context)
        parts.append({"kind": "thought", "seq": thought.sequence, "html": html})
    if len(visible) < len(thoughts):
        notes = list(session.thoughts.filter(type=ThoughtType.SCRATCHPAD))
        html = _render("_scratchpad.html", {**base, "scratchpad": notes})
        parts.append({"kind": "replace", "html": html})
    if event.sources or event.synthesis is not None:
        parts.append({"kind": "replace", "html": _render("_sources.html", {**base, **sources})})
    if event.plan or event.sources or event.finished:
        context = {**base, "plan_steps": plan_steps(session)}
        parts.append({"kind": "replace", "html": _render("_plan.html", context)})
    if event.questions or event.thoughts:
        subs = {"sub_questions": list(session.sub_questions.all()), **base}
        parts.append({"kind": "replace", "html": _render("_sub_questions.html", subs)})
    if event.synthesis is not None:
        synthesis = session.syntheses.get(sequence=event.synthesis)
        context = {**base, "synthesis": synthesis, "append_to": "synthesis-list"}
        context.pop("oob")
        html = _render("_synthesis.html", context)
        parts.append({"kind": "synthesis", "seq": synthesis.sequence, "html": html})
        chart = {**base, **chart_context(session)}
        parts.append({"kind": "replace", "html": _render("_confidence.html", chart)})
    if event.finished or session.is_finished:
        parts.append({"kind": "replace", "html": _render("_answer.html", base)})
        parts.append({"kind": "replace", "html": _render("_live.html", base)})
        parts.append({"kind": "replace", "html": _render("_steer.html", base)})
    return {"type": "session.update", "parts": parts}


def render_snapshot(session_id: uuid.UUID) -> tuple[str, set[int], set[int]]:
    """Every live region, replaced wholesale: for a page that may have missed updates.

    Returns the HTML and the thought and synthesis sequences it contains.
    """
    session = ThinkingSession.objects.get(pk=session_id)
    context = {**session_context(session), "oob": True}
    html = "".join(
        _render(name, context)
        for name in (
            "_header.html",
            "_live.html",
            "_plan.html",
            "_sources.html",
            "_scratchpad.html",
            "_thought_list.html",
            "_sub_questions.html",
            "_synthesis_list.html",
            "_confidence.html",
            "_answer.html",
        )
    )
    thoughts = {t.sequence for t in [*context["thoughts"], *context["scratchpad"]]}
    return html, thoughts, {s.sequence for s in context["syntheses"]}


async def publish(event: SessionEvent) -> None:
    message = await db_hop(render_event)(event)
    await get_channel_layer().group_send(group_name(event.session_id), message)


def publish_sync(event: SessionEvent) -> None:
    """For views: a state change made by a person shows on every open page at once."""
    message = render_event(event)
    async_to_sync(get_channel_layer().group_send)(group_name(event.session_id), message)
