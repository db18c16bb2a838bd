"""Re-ranking the open sub-questions as understanding grows (seed 000's
`prioritize_questions`).

Every DEEPTHINK_RERANK_EVERY cycles, and when new sources arrived since the last time, the
fast model (`LLM.utility`: DEEPTHINK_FAST_MODEL, else the session's model; thinking off)
reads the open sub-questions as numbered lines `[id] text` with the current understanding,
and answers in the seed's line style: `QUESTION_ID:` / `PRIORITY:` / `WHY:` blocks
separated by `---`.
A person's sub-question keeps its place: it is neither shown nor moved. Each move is kept on
the sub-question (`priority_changes`), so the tree can show when and why it moved.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from config.hops import db_hop
from thinking.deliberation import interrupt, prompts, stages, transcript
from thinking.deliberation.run import Run
from thinking.events import SessionEvent
from thinking.models import Lap, SubQuestion, ThinkingSession, Thought
from thinking.page.live import publish_safely
from thinking.provider import parsing
from thinking.provider.llm import LLMError, Reply, prompt_message

logger = logging.getLogger(__name__)

MAX_QUESTIONS = 20  # the open questions shown to the model, by current priority
RERANK_MAX_TOKENS = 1024


@dataclass(frozen=True)
class OpenQuestion:
    id: int
    text: str
    priority: int


def rerank_prompt(
    *,
    question: str,
    open_questions: Sequence[OpenQuestion],
    understanding: str,
    recent: Sequence[prompts.ThoughtLine],
    new_sources: int,
    background: str = "",
) -> prompts.Prompt:
    stable = f"""{prompts.background_block(background)}Original Question: {question}

Re-rank the open sub-questions below: given the current understanding, how much would
answering each one now help answer the original question? Give every listed sub-question a
priority from 1 (can wait) to 10 (explore next), with a short reason.

Format (one block per sub-question, by its number in brackets):
QUESTION_ID: [id]
PRIORITY: [1-10]
WHY: [explanation]
---"""
    evidence = f"\nNew sources since the last ranking: {new_sources}." if new_sources else ""
    lines = "\n".join(f"[{q.id}] {q.text} (priority now {q.priority})" for q in open_questions)
    thoughts = "\n".join(f"- [{t.type}, {t.confidence:.2f}] {t.text}" for t in recent)
    variable = f"""Current understanding:
{understanding or "(no synthesis yet)"}{evidence}

Recent thoughts:
{thoughts or "(none yet)"}

Open sub-questions:
{lines}"""
    return prompts.Prompt(stable, variable)


def due(session: ThinkingSession, *, source_count: int, open_count: int) -> bool:
    """Every few cycles, or when new evidence arrived; only with something to order, and
    not when the session is about to write its final answer anyway."""
    if open_count < 2 or session.budget_exhausted or session.stop_requested:
        return False
    every = settings.DEEPTHINK_RERANK_EVERY
    return (
        session.cycles - session.cycles_at_last_rerank >= every
        or source_count > session.sources_at_last_rerank
    )


def _open_rows(session: ThinkingSession) -> models.QuerySet[SubQuestion]:
    """The session's open sub-questions the model asked: a person's keep their place."""
    return session.sub_questions.filter(explored=False, added_by=None)


def _material(session: ThinkingSession) -> dict[str, Any]:
    shown = _open_rows(session).order_by("-priority", "created_at")[:MAX_QUESTIONS]
    latest = session.syntheses.order_by("-sequence").values_list("text", flat=True).first()
    recent = Thought.objects.filter(session=session, type__in=transcript.MODEL_TYPES)
    recent_rows = recent.order_by("-sequence").values_list("type", "text", "confidence")[:8]
    return {
        "open_questions": [
            OpenQuestion(*row) for row in shown.values_list("pk", "text", "priority")
        ],
        "understanding": latest or "",
        "recent": [prompts.ThoughtLine(*line) for line in reversed(recent_rows)],
    }


Opened = tuple[int, dict[str, Any] | None]


def _open_reranking(session: ThinkingSession, *, worker_id: str) -> Opened:
    """Whether a re-ranking is due (by the open sub-questions and the sources found), and
    if so its material, with its stage entered (only while this worker holds the lease):
    (the sources' count, the material or None)."""
    source_count = session.sources.count()
    open_count = _open_rows(session).count()
    if not due(session, source_count=source_count, open_count=open_count):
        return source_count, None
    material = _material(session)
    if len(material["open_questions"]) < 2:  # explored since they were counted
        return source_count, None
    entry = stages.entry(
        "reflection", f"Re-ranking {len(material['open_questions'])} open sub-questions"
    )
    if not stages.record_sync(session.pk, entry, worker_id=worker_id):
        return source_count, None  # the session ended meanwhile
    return source_count, material


open_reranking = db_hop(_open_reranking)


def apply_rankings(session: ThinkingSession, rankings: Sequence[parsing.ParsedRanking]) -> int:
    """Move the priorities of open, model-asked sub-questions (inside the step, which holds
    the session's row); returns how many moved."""
    by_id = {r.question_id: r for r in rankings}
    rows = _open_rows(session).select_for_update().filter(pk__in=by_id).order_by("pk")
    moved = []
    for question in rows:
        ranking = by_id[question.pk]
        if ranking.priority == question.priority:
            continue
        change = {
            "from": question.priority,
            "to": ranking.priority,
            "why": ranking.why,
            "cycle": session.cycles,
            "at": timezone.now().isoformat(),
        }
        if question.initial_priority is None:
            question.initial_priority = question.priority
        question.priority = ranking.priority
        question.priority_changes = [*question.priority_changes, change][-20:]
        moved.append(question)
    fields = ["priority", "initial_priority", "priority_changes"]
    SubQuestion.objects.bulk_update(moved, fields)
    return len(moved)


class _Ended(Exception):
    """The session finished while the re-ranking call ran (rolls the step back)."""


def _store(
    session_id: uuid.UUID,
    rankings: Sequence[parsing.ParsedRanking],
    reply: Reply | None,
    source_count: int,
    *,
    worker_id: str,
    meter: Lap,
) -> ThinkingSession | None:
    """The moves, the call, the stage that says how many moved and the checkpoint as one
    step (refused without the lease). None when the session ended meanwhile: nothing is
    written then."""
    try:
        with ThinkingSession.step(session_id, worker_id=worker_id, meter=meter) as step:
            session = step.session
            if session.is_finished:
                raise _Ended
            moved = apply_rankings(session, rankings)
            step.update(cycles_at_last_rerank=session.cycles, sources_at_last_rerank=source_count)
            if reply is not None:
                step.record_calls("rerank", [reply])
            message = (
                f"Re-ranked the open sub-questions: {moved} moved"
                if reply is not None
                else "Re-ranking failed"
            )
            step.update(**stages.record(session, stages.entry("reflection", message)))
    except _Ended:
        return None
    return step.session


store = db_hop(_store)


async def maybe_rerank(*, session: ThinkingSession, run: Run) -> ThinkingSession:
    """Re-rank when due; returns the session as stored. A failed call skips this round (the
    priorities stay as they were) and never stops the thinking."""
    source_count, material = await open_reranking(session, worker_id=run.worker_id)
    if material is None:
        return session
    await stages.show(session.pk, run.publish)
    open_questions = material.pop("open_questions")
    prompt = rerank_prompt(
        question=session.question,
        open_questions=open_questions,
        new_sources=max(0, source_count - session.sources_at_last_rerank),
        background=session.parent_context,  # a follow-up's earlier session (#19)
        **material,
    )
    reply: Reply | None = None
    try:
        # Utility work: the fast model, thinking off; a pause or cancel (or a takeover)
        # stops it in flight.
        reply = await interrupt.watched(
            run.llm.utility(
                [prompt_message(prompt)],
                system=prompts.system(session.language),
                main_model=session.model_id,
                max_tokens=RERANK_MAX_TOKENS,
            ),
            session_id=session.pk,
            meter=run.meter,
            worker_id=run.worker_id,
        )
        rankings = parsing.parse_rankings(reply.text, known=[q.id for q in open_questions])
    except LLMError as error:
        if error.kind in ("auth", "not_configured"):
            raise
        logger.warning("Session %s: re-ranking skipped: %s", session.pk, error)
        rankings = []
    stored = await store(
        session.pk, rankings, reply, source_count, worker_id=run.worker_id, meter=run.meter
    )
    if stored is None:
        return session
    # The stages the store entered, and the moves.
    await publish_safely(run.publish, SessionEvent(session.pk, questions=True, plan=True))
    return stored
