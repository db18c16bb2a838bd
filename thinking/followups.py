"""Think longer and follow up (#19): a finished session given more time, and a new session
that starts from a finished one's answer, last synthesis and sources."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F

from research.models import Role

from . import limits
from .models import (
    CompletionReason,
    Extension,
    Source,
    Status,
    ThinkingSession,
)

# Finished by one of these, a session has a final answer worth thinking on from.
EXTENDABLE_REASONS = (
    CompletionReason.BUDGET,
    CompletionReason.STOP_SIGNAL,
    CompletionReason.TOKEN_CEILING,
)
MIN_EXTEND_MINUTES = 0.05


class CannotExtend(Exception):
    """The session may not be extended now; the message says why (a 409)."""


def may_extend(session: ThinkingSession, user: Any) -> bool:
    """The owner, or an owner of the team it is shared with: an extension spends money."""
    if session.is_owned_by(user):
        return True
    return session.team is not None and session.team.role_of(user) == Role.OWNER


def minutes_problem(minutes: Any) -> str:
    """Why these minutes are not a valid extension ("" if they are): a 422."""
    if isinstance(minutes, bool) or not isinstance(minutes, int | float):
        return "Give the extra minutes as a number."
    if minutes != minutes or minutes < MIN_EXTEND_MINUTES:  # NaN, or too short
        return f"Give it at least {MIN_EXTEND_MINUTES:g} minutes (3 seconds)."
    if minutes > settings.DEEPTHINK_MAX_MINUTES:
        return f"The longest extension here is {settings.DEEPTHINK_MAX_MINUTES:g} minutes."
    return ""


def refuse_extension(session: ThinkingSession, user: Any, minutes: float) -> str:
    """Why this session may not be extended now ("" if it may): a 409."""
    if session.status != Status.COMPLETED or session.completion_reason not in EXTENDABLE_REASONS:
        return (
            f"Only a completed session can think longer; this one is "
            f"{session.get_status_display().lower()}."
        )
    # The same limits as a new session: running sessions, starts per hour, the team budget.
    return limits.refuse_start(user, minutes=minutes, team=session.team)


def extend(session: ThinkingSession, *, user: Any, minutes: float) -> ThinkingSession:
    """Reopen a completed session with `minutes` more thinking time. The worker runs it again
    from its stored state; its earlier final answer stays as a final synthesis (a version)."""
    with transaction.atomic():
        locked = ThinkingSession.objects.select_for_update().get(pk=session.pk)
        reason = refuse_extension(locked, user, minutes)
        if reason:
            raise CannotExtend(reason)
        budget = max(locked.budget_seconds, locked.active_seconds) + minutes * 60
        changes: dict[str, Any] = {
            "status": Status.CREATED,
            "budget_seconds": budget,
            "completion_reason": "",
            "completion_note": "",
            "finished_at": None,
            "stop_requested": False,
            "final_answer": "",
            "final_confidence": None,
            "next_synthesis_at": locked.active_seconds + locked.synthesis_interval_seconds,
            "worker_id": "",
            "heartbeat_at": None,
            "revision": F("revision") + 1,
        }
        if locked.token_ceiling is not None:
            # The ceiling applies again to the extension: as many tokens as the session was
            # first allowed, within what is left of its team's monthly budget.
            allowance = limits.token_ceiling_for(locked.team, locked.token_ceiling) or 0
            changes["token_ceiling"] = locked.total_tokens + allowance
        ThinkingSession.objects.filter(pk=locked.pk).update(**changes)
        Extension.objects.create(session=locked, by=user, minutes=minutes)
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


def copy_sources(parent: ThinkingSession, child: ThinkingSession) -> int:
    """The parent's sources become the child's, with the same citation numbers; new research
    numbers after them."""
    rows = [
        Source(
            session=child,
            number=s.number,
            kind=s.kind,
            title=s.title,
            url=s.url,
            snippet=s.snippet,
            score=s.score,
            query=s.query,
            key=s.key,
        )
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


def page_context(session: ThinkingSession, viewer: Any) -> dict[str, Any]:
    """The session page's follow-up part: links, earlier answers, and what the viewer may do."""
    from .forms import ExtendForm, StartSessionForm

    finished = session.is_finished
    follow_up = None
    if finished:
        follow_up = StartSessionForm(user=viewer, initial={"parent": session.pk})
    return {
        **links(session, viewer),
        "answer_versions": answer_versions(session),
        "may_extend": finished
        and session.status == Status.COMPLETED
        and session.completion_reason in EXTENDABLE_REASONS
        and may_extend(session, viewer),
        "extend_form": ExtendForm(),
        "follow_up_form": follow_up,
        "extensions": list(session.extensions.all()),
    }
