"""Think longer and follow up (#19): a finished session given more time, and a new session
that starts from a finished one's answer, last synthesis and sources."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from thinking.events import SessionEvent
from thinking.formatting import counted
from thinking.models import (
    CompletionReason,
    Extension,
    Source,
    Status,
    ThinkingSession,
)
from thinking.people import budget

# Finished by one of these, a session has a final answer worth thinking on from.
EXTENDABLE_REASONS = (
    CompletionReason.BUDGET,
    CompletionReason.STOP_SIGNAL,
    CompletionReason.TOKEN_CEILING,
    CompletionReason.CONCLUDED,
)
MIN_EXTEND_MINUTES = 0.05


class CannotExtend(Exception):
    """The session may not be extended now; the message says why (a 409)."""


def minutes_problem(minutes: Any) -> str:
    """Why these minutes are not a valid extension ("" if they are): a 422."""
    if isinstance(minutes, bool) or not isinstance(minutes, int | float):
        return "Give the extra minutes as a number."
    if minutes != minutes or minutes < MIN_EXTEND_MINUTES:  # NaN, or too short
        return f"Give it at least {MIN_EXTEND_MINUTES:g} minutes (3 seconds)."
    if minutes > settings.DEEPTHINK_MAX_MINUTES:
        return f"The longest extension here is {counted(settings.DEEPTHINK_MAX_MINUTES, 'minute')}."
    return ""


def is_extendable(session: ThinkingSession) -> bool:
    return session.status == Status.COMPLETED and session.completion_reason in EXTENDABLE_REASONS


def refuse_extension(session: ThinkingSession) -> str:
    """Why this session's state does not allow more time ("" if it does): a 409. The limits
    are decided by `actions.extend`, atomically, like a start."""
    if not is_extendable(session):
        return (
            f"Only a completed session can think longer; this one is "
            f"{session.get_status_display().lower()}."
        )
    return ""


def unused_seconds(session: ThinkingSession) -> float:
    """The thinking time a finished session left unused (it stopped before its budget: a
    stop signal, a ceiling, a conclude)."""
    return max(0.0, session.budget_seconds - session.active_seconds)


def reopen(
    session: ThinkingSession,
    *,
    user: Any,
    minutes: float,
    add_remainder: bool = False,
    publish: Any = None,
) -> ThinkingSession:
    """The stored part of an extension (people call `actions.extend`): reopen a completed
    session to think `minutes` more (and, with `add_remainder`, the time it left unused as
    well), through the step door like a person's pause. The worker runs it again from its
    stored state; its earlier final answer stays as a final synthesis (a version). Raises
    CannotExtend if it is no longer completed."""
    with ThinkingSession.step(session.pk, stop_on_cancel=False, on_commit=publish) as step:
        locked = step.session
        reason = refuse_extension(locked)
        if reason:
            raise CannotExtend(reason)
        step.update(
            status=Status.CREATED,
            budget_seconds=locked.active_seconds
            + (unused_seconds(locked) if add_remainder else 0.0)
            + minutes * 60,
            completion_reason="",
            completion_note="",
            finished_at=None,
            stop_requested=False,
            conclude_requested=False,
            final_answer="",
            final_confidence=None,
            next_synthesis_at=locked.active_seconds + locked.synthesis_interval_seconds,
            worker_id="",
            heartbeat_at=None,
        )
        # The ceilings apply again to the extension: as much as the session was first
        # allowed, on top of what it spent, within what is left of its team's budget
        # (raises budget.BudgetExhausted when nothing is).
        tokens, dollars = budget.reserve(
            locked.team, tokens=locked.token_ceiling, dollars=locked.max_cost_usd
        )
        if tokens is not None:
            step.update(token_ceiling=locked.total_tokens + tokens)
        if dollars is not None:
            spent = budget.session_cost(locked) or 0
            step.update(max_cost_usd=spent + dollars)
        Extension.objects.create(session=locked, by=user, minutes=minutes)
        step.announce(SessionEvent(locked.pk))
    session.refresh_from_db()
    return session


def answer_versions(session: ThinkingSession) -> list[Any]:
    """Every final answer the session gave, oldest first (one per run)."""
    return list(session.syntheses.filter(is_final=True).order_by("sequence"))


# --- follow-ups ------------------------------------------------------------------------

CONTEXT_ANSWER_CHARS = 8000
CONTEXT_SYNTHESIS_CHARS = 4000
CONTEXT_SOURCES = 40


def parent_context(parent: ThinkingSession) -> str:
    """What a follow-up's prompts carry of its parent, fixed at creation: the same text on
    every call, so it sits in the cached prompt prefix."""
    last = parent.syntheses.filter(is_final=False).order_by("-sequence").first()
    answer = parent.final_answer or "(it gave no final answer)"
    lines = [
        "This question follows up an earlier Deep Think session.",
        f"Earlier question: {parent.question}",
        "",
        "Its final answer"
        + (f" (confidence {parent.final_confidence:.2f})" if parent.final_confidence else "")
        + ":",
        answer[:CONTEXT_ANSWER_CHARS],
    ]
    if last is not None:
        lines += ["", "Its last synthesis:", last.text[:CONTEXT_SYNTHESIS_CHARS]]
    sources = list(parent.sources.order_by("number")[:CONTEXT_SOURCES])
    if sources:
        lines += ["", "Its sources, which keep their numbers here (cite them as [n]):"]
        lines += [f"[{s.number}] {s.title}" + (f" <{s.url}>" if s.url else "") for s in sources]
    return "\n".join(lines)


def refuse_parent(parent: ThinkingSession) -> str:
    if not parent.is_finished:
        return "Ask a follow-up once this session has finished."
    return ""


COPY_SKIPS = ("id", "session", "created_at")


def copy_sources(parent: ThinkingSession, child: ThinkingSession) -> int:
    """The parent's sources become the child's, with the same citation numbers; new research
    numbers after them."""
    # Every column but the row's identity, so a field added to Source later is carried too
    # (what found it shows in the per-tool reference summary).
    names = [f.attname for f in Source._meta.concrete_fields if f.name not in COPY_SKIPS]
    rows = [
        Source(session=child, **{name: getattr(s, name) for name in names})
        for s in parent.sources.order_by("number")
    ]
    Source.objects.bulk_create(rows)
    return len(rows)


def link_follow_up(child: ThinkingSession, parent: ThinkingSession) -> None:
    """Make `child` (just created, in the same transaction) a follow-up of `parent`."""
    child.parent = parent
    child.parent_context = parent_context(parent)
    child.save(update_fields=["parent", "parent_context"])
    copy_sources(parent, child)


def _link(session: ThinkingSession) -> dict[str, Any]:
    return {"id": session.pk, "url": session.get_absolute_url(), "question": session.question}


def links(session: ThinkingSession, viewer: Any) -> dict[str, Any]:
    """`parent` and `children` for the JSON, as far as the viewer may see them."""
    visible = ThinkingSession.objects.visible_to(viewer)
    parent = visible.filter(pk=session.parent_id).first() if session.parent_id else None
    children = visible.filter(parent=session).order_by("created_at")
    return {
        "parent": _link(parent) if parent else None,
        "children": [_link(c) for c in children],
    }
