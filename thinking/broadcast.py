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
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.template.loader import render_to_string

from .events import SessionEvent
from .models import ThinkingSession
from .presenters import chart_context, session_context


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
    base = {"session": session, "oob": True}
    parts: list[dict[str, Any]] = [
        {"kind": "replace", "html": _render("_header.html", base)},
    ]
    thoughts = (
        session.thoughts.filter(sequence__in=event.thoughts)
        .select_related("sub_question")
        .order_by("sequence")
    )
    for index, thought in enumerate(thoughts):
        # One event is one cycle: its parts show once, under its first thought.
        context = {"thought": thought, "append_to": "thought-list", "show_parts": index == 0}
        html = _render("_thought.html", context)
        parts.append({"kind": "thought", "seq": thought.sequence, "html": html})
    if event.questions or event.thoughts:
        subs = {"sub_questions": list(session.sub_questions.all()), **base}
        parts.append({"kind": "replace", "html": _render("_sub_questions.html", subs)})
    if event.synthesis is not None:
        synthesis = session.syntheses.get(sequence=event.synthesis)
        html = _render("_synthesis.html", {"synthesis": synthesis, "append_to": "synthesis-list"})
        parts.append({"kind": "synthesis", "seq": synthesis.sequence, "html": html})
        chart = {**base, **chart_context(session)}
        parts.append({"kind": "replace", "html": _render("_confidence.html", chart)})
    if event.finished or session.is_finished:
        parts.append({"kind": "replace", "html": _render("_answer.html", base)})
        parts.append({"kind": "replace", "html": _render("_live.html", base)})
    return {"type": "session.update", "parts": parts}


def render_snapshot(session_id: uuid.UUID) -> tuple[str, int, int]:
    """Every live region, replaced wholesale: for a page that may have missed updates.

    Returns the HTML and the last thought and synthesis sequences it contains.
    """
    session = ThinkingSession.objects.get(pk=session_id)
    context = {**session_context(session), "oob": True}
    html = "".join(
        _render(name, context)
        for name in (
            "_header.html",
            "_live.html",
            "_thought_list.html",
            "_sub_questions.html",
            "_synthesis_list.html",
            "_confidence.html",
            "_answer.html",
        )
    )
    last_thought = context["thoughts"][-1].sequence if context["thoughts"] else -1
    last_synthesis = context["syntheses"][-1].sequence if context["syntheses"] else -1
    return html, last_thought, last_synthesis


async def publish(event: SessionEvent) -> None:
    message = await database_sync_to_async(render_event)(event)
    await get_channel_layer().group_send(group_name(event.session_id), message)


def publish_sync(event: SessionEvent) -> None:
    """For views: a state change made by a person shows on every open page at once."""
    message = render_event(event)
    async_to_sync(get_channel_layer().group_send)(group_name(event.session_id), message)
