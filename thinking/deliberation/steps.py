"""The loop's stored steps: each opens one `ThinkingSession.step` (lock, lease and cancel
check, checkpoint, revision) and writes its rows inside it.

Model calls happen outside: a step is only ever the short transaction that stores what a
call produced, so a worker that lost its lease, or a cancelled session, stores nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.db.models import F, Max
from django.utils import timezone

from config.hops import db_hop
from research import knowledge
from research.models import KnowledgeSource
from thinking.deliberation import citations, signals, stages
from thinking.deliberation.run import Meter
from thinking.events import SessionEvent
from thinking.models import (
    IllegalTransition,
    LeaseLost,
    Source,
    Step,
    Stopped,
    SubQuestion,
    Synthesis,
    ThinkingSession,
    Thought,
    ThoughtType,
)
from thinking.people import notify
from thinking.provider import parsing
from thinking.provider.llm import Reply

if TYPE_CHECKING:
    from thinking.deliberation import planner
    from thinking.state import StageEntry

MAX_ANSWER_CHARS = 500


@dataclass(frozen=True)
class Focus:
    text: str
    sub_question_id: int | None = None
    priority: int = 0


def select_focus(session: ThinkingSession) -> Focus:
    """The highest-priority unexplored sub-question, else the original question: a person's
    question first (they asked for it now), then by priority, oldest first."""
    found = (
        SubQuestion.objects.filter(session=session, explored=False)
        .order_by(F("added_by").desc(nulls_last=True), "-priority", "created_at")
        .values_list("pk", "text", "priority")
        .first()
    )
    if found is None:
        return Focus(text=session.question)
    pk, text, priority = found
    return Focus(text=text, sub_question_id=pk, priority=priority)


def reasoning_text(reply: Reply) -> str:
    """The model's thinking as shown to people: redacted blocks become a placeholder."""
    parts = [reply.thinking] if reply.thinking else []
    if reply.redacted_blocks:
        n = reply.redacted_blocks
        parts.append(f"[{n} reasoning block{'s' if n > 1 else ''} redacted by the provider]")
    return "\n\n".join(parts)


# --- the lifecycle ----------------------------------------------------------------------


def plans_first(session: ThinkingSession) -> bool:
    """Whether the loop plans and researches before its first thought cycle: the session
    researches and has no plan yet (one resumed after its plan goes on thinking), and no
    one has asked for its answer now."""
    return not session.plan and session.research_enabled and not session.conclude_requested


def begin_sync(
    session_id: uuid.UUID, *, worker_id: str, planning: StageEntry | None = None
) -> ThinkingSession | None:
    """Move a claimed session to `thinking` and start its clock; when it plans first
    (`plans_first`), its planning stage (`planning`) is entered in the same transaction.
    None if it is not runnable, or another worker claimed it since (that worker runs it:
    not an error)."""
    try:
        with ThinkingSession.step(session_id, worker_id=worker_id) as step:
            changes = step.session.begin(now=timezone.now())
            if planning is not None and plans_first(step.session):
                changes.update(stages.record(step.session, planning))
            step.update(**changes)
    except (IllegalTransition, Stopped, LeaseLost):
        return None
    return step.session


def _stop_running(session_id: uuid.UUID, *, worker_id: str, meter: Meter) -> ThinkingSession:
    """Pause or cancel seen at a step boundary: keep the time spent, stop the clock."""
    with ThinkingSession.step(
        session_id, worker_id=worker_id, meter=meter, stop_on_cancel=False
    ) as step:
        step.update(**step.session.stop())
    return step.session


stop_running = db_hop(_stop_running)


def _release_lease(session_id: uuid.UUID, *, worker_id: str) -> None:
    """Let go of a session this worker holds (it is shutting down); no-op if it lost it."""
    try:
        with ThinkingSession.step(session_id, worker_id=worker_id, stop_on_cancel=False) as step:
            step.update(**step.session.release())
    except LeaseLost:
        pass


release_lease = db_hop(_release_lease)


def _fail(
    session_id: uuid.UUID, *, worker_id: str, meter: Meter, message: str
) -> ThinkingSession | None:
    """Record the error in words and keep everything already stored. None if the lease
    was lost."""
    try:
        with ThinkingSession.step(
            session_id, worker_id=worker_id, meter=meter, stop_on_cancel=False
        ) as step:
            if not step.session.is_finished:
                step.update(**step.session.fail(message=message, now=timezone.now()))
                notify.schedule(session_id)  # mail and webhook once committed (#19)
    except LeaseLost:
        return None
    return step.session


fail = db_hop(_fail)


def _set_waiting(session_id: uuid.UUID, worker_id: str, reason: str) -> str:
    """Mark (or, with no reason, unmark) the session as waiting for the provider; returns
    its status, so a person's pause or cancel is noticed while it waits."""
    with ThinkingSession.step(session_id, worker_id=worker_id, stop_on_cancel=False) as step:
        if reason:
            step.update(waiting_reason=reason[:300])
            if step.session.waiting_since is None:
                step.update(waiting_since=timezone.now())
        else:
            step.update(waiting_since=None, waiting_reason="")
    return step.session.status


set_waiting = db_hop(_set_waiting)


# --- storing what the model said ---------------------------------------------------------


def _stop_note(session: ThinkingSession, reading: parsing.ThoughtReply) -> str:
    why = reading.parts.get("reasoning") or reading.parts.get("analysis") or ""
    why = why or (reading.thoughts[0].text if reading.thoughts else "")
    note = (
        f"Stopped early after {session.active_seconds:.0f}s of "
        f"{session.budget_seconds:.0f}s: the model signalled that its understanding "
        "was sufficient."
    )
    return f"{note} Its reasoning: {why[:600]}" if why else note


def _store_thoughts(
    session_id: uuid.UUID,
    focus: Focus,
    reading: parsing.ThoughtReply,
    replies: list[Reply],
    scratch: list[str],
    *,
    worker_id: str,
    meter: Meter,
) -> tuple[ThinkingSession, SessionEvent]:
    """A cycle's thoughts (and its scratchpad notes) stored, with its model calls; the
    sub-question it was on explored. The session comes back with its thoughts counted
    (`thought_count`), which decides whether sub-questions are due."""
    with ThinkingSession.step(session_id, worker_id=worker_id, meter=meter) as step:
        session = step.session
        begin = session.next_thought_sequence()
        reasoning = "\n\n".join(filter(None, (reasoning_text(r) for r in replies)))
        common = {
            "session_id": session.pk,
            "cycle": session.cycles,
            "time_offset_seconds": round(session.active_seconds, 2),
            "sub_question_id": focus.sub_question_id,
        }
        # The scratchpad notes first, then the thoughts, numbered on.
        notes = [
            Thought(text=text, type=ThoughtType.SCRATCHPAD, confidence=0.0, **common)
            for text in scratch
            if text
        ]
        thoughts = [
            Thought(
                text=thought.text,
                type=thought.type,
                confidence=thought.confidence,
                parts=reading.parts,
                reasoning=reasoning if index == 0 else "",
                truncated=replies[-1].truncated,
                **common,
            )
            for index, thought in enumerate(reading.thoughts)
        ]
        rows = [*notes, *thoughts]
        for sequence, row in enumerate(rows, start=begin):
            row.sequence = sequence
        Thought.objects.bulk_create(rows)
        end = begin + len(rows)
        step.record_calls("thoughts", replies)
        # Thoughts cite too: their unknown numbers are counted like the syntheses'.
        _count_unknown_citations(
            step, [n for thought in reading.thoughts for n in citations.cited_numbers(thought.text)]
        )
        routes = dict(session.parse_routes)
        routes[reading.route] = routes.get(reading.route, 0) + 1
        step.update(parse_routes=routes)
        step.update(**signals.changes_for(session, reading))  # format errors, per cycle
        # A stop signal counts only once the session has consolidated at least once.
        if reading.stop_signal and session.syntheses.filter(is_final=False).exists():
            step.update(stop_requested=True, completion_note=_stop_note(session, reading))
        if focus.sub_question_id is not None:
            best = max(reading.thoughts, key=lambda t: t.confidence, default=None)
            SubQuestion.objects.filter(pk=focus.sub_question_id).update(
                explored=True,
                explored_at=timezone.now(),
                answer=best.text[:MAX_ANSWER_CHARS] if best else "",
            )
        step.add(cycles=1)
        step.update(focus=focus.text)
    session = step.session
    session.thought_count = end  # numbered 0..n-1 under the row lock: their count
    event = SessionEvent(
        session_id,
        thoughts=tuple(range(begin, end)),
        questions=focus.sub_question_id is not None,
    )
    return session, event


store_thoughts = db_hop(_store_thoughts)


def _store_questions(
    session_id: uuid.UUID,
    focus: Focus,
    parsed: list[parsing.ParsedQuestion],
    reply: Reply,
    *,
    worker_id: str,
    meter: Meter,
) -> tuple[ThinkingSession, SessionEvent]:
    """New sub-questions stored (those already asked left out), with the model call."""
    with ThinkingSession.step(session_id, worker_id=worker_id, meter=meter) as step:
        session = step.session
        asked = [(question, parsing.question_digest(question.text)) for question in parsed]
        # Only the rows that would be duplicates are read, by their index (`text_key`).
        wanted = {key for _, key in asked if key}
        found = session.sub_questions.filter(text_key__in=wanted).values_list("text_key", flat=True)
        seen = {parsing.question_digest(session.question), *found}
        new = []
        for question, key in asked:
            if not key or key in seen:
                continue
            seen.add(key)
            new.append(
                SubQuestion(
                    session_id=session.pk,
                    text=question.text,
                    priority=question.priority,
                    why=question.why,
                    parent_id=focus.sub_question_id,
                    text_key=key,
                )
            )
        SubQuestion.objects.bulk_create(new)
        step.record_calls("questions", [reply])
        # Thoughts are numbered 0..n-1 under the row lock: the next number is their count.
        step.update(thoughts_at_last_questions=session.next_thought_sequence())
    return step.session, SessionEvent(session_id, questions=bool(new))


store_questions = db_hop(_store_questions)


def _count_unknown_citations(step: Step, cited: list[int]) -> None:
    """Count on the session each citation of a number it has no source for. Only the
    numbers cited are looked up: a session's sources grow with it, a step's citations do
    not."""
    if not cited:
        return
    rows = Source.objects.filter(session_id=step.session.pk, number__in=set(cited))
    known = set(rows.values_list("number", flat=True))
    unknown = sum(1 for n in cited if n not in known)
    if unknown:
        step.add(unknown_citations=unknown)


def _store_synthesis(
    session_id: uuid.UUID,
    parsed: parsing.ParsedSynthesis,
    reply: Reply,
    *,
    worker_id: str,
    meter: Meter,
    final: bool,
    reason: str,
) -> tuple[ThinkingSession, SessionEvent]:
    """A periodic synthesis, or the final answer that completes the session."""
    with ThinkingSession.step(session_id, worker_id=worker_id, meter=meter) as step:
        session = step.session
        newest = session.syntheses.aggregate(newest=Max("sequence"))["newest"]
        synthesis = Synthesis.objects.create(
            session_id=session.pk,
            sequence=0 if newest is None else newest + 1,
            text=parsed.text,
            key_insights=parsed.key_insights,
            confidence=parsed.confidence,
            remaining_questions=parsed.remaining_questions,
            # The time of the last stored step; this step's own lap is added on commit.
            time_offset_seconds=round(session.active_seconds, 2),
            is_final=final,
            reasoning=reasoning_text(reply),
            truncated=reply.truncated,
        )
        step.record_calls("final" if final else "synthesis", [reply])
        step.update(confidence_evolution=[*session.confidence_evolution, parsed.confidence])
        _count_unknown_citations(step, citations.cited_numbers(parsed.text))
        if final:
            # Later sessions learn from this one: the answer joins the owner's knowledge base.
            knowledge.add_item(
                owner=session.owner,
                title=f"Deep Think: {session.question}"[:200],
                body=parsed.text,
                source=KnowledgeSource.SESSION,
                origin=f"session:{session.pk}",
                team=session.team,  # a shared session teaches the whole team
            )
            step.update(
                **session.complete(
                    reason=reason,
                    answer=parsed.text,
                    confidence=parsed.confidence,
                    now=timezone.now(),
                )
            )
            notify.schedule(session_id)  # mail and webhook once committed (#19)
        else:
            step.update(
                next_synthesis_at=session.active_seconds + session.synthesis_interval_seconds
            )
    event = SessionEvent(session_id, synthesis=synthesis.sequence, finished=final)
    return step.session, event


store_synthesis = db_hop(_store_synthesis)


def _save_plan(
    session_id: uuid.UUID,
    plan: planner.Plan,
    replies: Sequence[Reply],
    *,
    worker_id: str,
    meter: Meter,
    focus_id: int | None = None,
    entering: StageEntry | None = None,
) -> ThinkingSession:
    """The plan stored (a sub-question's plan only marks it researched) with its call and,
    in the same transaction, `entering`: the stage the loop enters next (its research)."""
    with ThinkingSession.step(session_id, worker_id=worker_id, meter=meter) as step:
        session = step.session
        if entering is not None:
            step.update(**stages.record(session, entering))
        if focus_id is None:
            step.update(plan=plan.to_json())
        else:
            # A fresh plan for a high-priority sub-question keeps the session's main plan.
            researched = [*session.plan.get("researched", []), focus_id]
            step.update(plan={**session.plan, "researched": researched})
        if plan.note and plan.note not in session.research_notes:
            step.update(research_notes=[*session.research_notes, plan.note][-20:])
        step.record_calls("plan", replies)
    return step.session


save_plan = db_hop(_save_plan)
