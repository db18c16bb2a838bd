"""Re-ranking the open sub-questions as understanding grows (seed 000's
`prioritize_questions`).

Every DEEPTHINK_RERANK_EVERY cycles, and when new sources arrived since the last time, the
fast model (DEEPTHINK_FAST_MODEL, else the session's model; thinking off) reads the open
sub-questions as numbered lines `[id] text` with the current understanding, and answers in
the seed's line style: `QUESTION_ID:` / `PRIORITY:` / `WHY:` blocks separated by `---`.
A person's sub-question keeps its place: it is neither shown nor moved. Each move is kept on
the sub-question (`priority_changes`), so the tree can show when and why it moved.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from . import interrupt, parsing, prompts, stages
from .capabilities import ThinkingSettings
from .events import Publish, SessionEvent
from .llm import LLM, LLMError, Reply, user_message
from .models import ModelCall, SubQuestion, ThinkingSession

logger = logging.getLogger(__name__)

MAX_QUESTIONS = 20  # the open questions shown to the model, by current priority
RERANK_MAX_TOKENS = 1024
MODEL_TYPES = ("exploration", "critique", "connection", "insight")


@dataclass(frozen=True)
class OpenQuestion:
    id: int
    text: str
    priority: int


def fast_model(session: ThinkingSession) -> str:
    return getattr(settings, "DEEPTHINK_FAST_MODEL", "") or session.model_id


def rerank_prompt(
    *,
    question: str,
    open_questions: Sequence[OpenQuestion],
    understanding: str,
    recent: Sequence[prompts.ThoughtLine],
    new_sources: int,
) -> prompts.Prompt:
    stable = f"""Original Question: {question}

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


def _material(session: ThinkingSession) -> dict[str, Any]:
    open_questions = [
        OpenQuestion(q.pk, q.text, q.priority)
        for q in session.sub_questions.filter(explored=False, added_by__isnull=True).order_by(
            "-priority", "created_at"
        )[:MAX_QUESTIONS]
    ]
    latest = session.syntheses.order_by("-sequence").first()
    recent = list(session.thoughts.filter(type__in=MODEL_TYPES).order_by("-sequence")[:8])
    return {
        "open_questions": open_questions,
        "understanding": latest.text if latest else "",
        "recent": [prompts.ThoughtLine(t.type, t.text, t.confidence) for t in reversed(recent)],
        "source_count": session.sources.count(),
    }


def apply_rankings(
    session: ThinkingSession, rankings: Sequence[parsing.ParsedRanking]
) -> list[SubQuestion]:
    """Move the priorities of open, model-asked sub-questions; returns the ones that moved."""
    by_id = {r.question_id: r for r in rankings}
    moved = []
    rows = session.sub_questions.select_for_update().filter(
        pk__in=by_id, explored=False, added_by__isnull=True
    )
    for q in rows:
        ranking = by_id[q.pk]
        if ranking.priority == q.priority:
            continue
        change = {
            "from": q.priority,
            "to": ranking.priority,
            "why": ranking.why,
            "cycle": session.cycles,
            "at": timezone.now().isoformat(),
        }
        if q.initial_priority is None:
            q.initial_priority = q.priority
        q.priority = ranking.priority
        q.priority_changes = [*q.priority_changes, change][-20:]
        q.save(update_fields=["priority", "initial_priority", "priority_changes"])
        moved.append(q)
    return moved


@database_sync_to_async
def _store(
    session_id: uuid.UUID,
    worker_id: str,
    rankings: Sequence[parsing.ParsedRanking],
    reply: Reply | None,
    source_count: int,
    seconds: float,
) -> tuple[ThinkingSession, int] | None:
    with transaction.atomic():
        session = ThinkingSession.objects.select_for_update().get(pk=session_id)
        if session.worker_id != worker_id or session.is_finished:
            return None  # another worker took it over, or it was cancelled: write nothing
        moved = apply_rankings(session, rankings)
        changes: dict[str, Any] = {
            "cycles_at_last_rerank": session.cycles,
            "sources_at_last_rerank": source_count,
            "active_seconds": F("active_seconds") + seconds,
            "heartbeat_at": timezone.now(),
            "revision": F("revision") + 1,
        }
        if reply is not None:
            usage = reply.usage
            changes.update(
                input_tokens=F("input_tokens") + usage.input_tokens,
                output_tokens=F("output_tokens") + usage.output_tokens,
                cache_read_tokens=F("cache_read_tokens") + usage.cache_read_tokens,
                cache_write_tokens=F("cache_write_tokens") + usage.cache_write_tokens,
            )
            ModelCall.objects.create(
                session=session,
                purpose="rerank",
                model=reply.model or fast_model(session),
                thinking_mode=reply.thinking_mode,
                stop_reason=reply.stop_reason or "",
                duration_ms=reply.duration_ms,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cache_read_tokens=usage.cache_read_tokens,
                cache_write_tokens=usage.cache_write_tokens,
                content=reply.content,
            )
        ThinkingSession.objects.filter(pk=session_id).update(**changes)
        session.refresh_from_db()
    return session, len(moved)


async def maybe_rerank(
    *,
    session: ThinkingSession,
    llm: LLM,
    meter: Any,
    worker_id: str,
    publish: Publish,
) -> ThinkingSession:
    """Re-rank when due; returns the session as stored. A failed call skips this round (the
    priorities stay as they were) and never stops the thinking."""
    material = await database_sync_to_async(_material)(session)
    open_questions = material.pop("open_questions")
    source_count = material.pop("source_count")
    if not due(session, source_count=source_count, open_count=len(open_questions)):
        return session
    steps = {"worker_id": worker_id, "publish": publish}
    count = len(open_questions)
    await stages.enter(session.pk, "reflection", f"Re-ranking {count} open sub-questions", **steps)
    prompt = rerank_prompt(
        question=session.question,
        open_questions=open_questions,
        new_sources=max(0, source_count - session.sources_at_last_rerank),
        **material,
    )
    reply: Reply | None = None
    try:
        reply = await interrupt.watched(
            llm.stream(
                [user_message(prompt.stable, prompt.variable)],
                system=prompts.SYSTEM,
                model=fast_model(session),
                thinking=ThinkingSettings(mode="off", max_tokens=RERANK_MAX_TOKENS),
            ),
            session_id=session.pk,
            meter=meter,
        )
        rankings = parsing.parse_rankings(reply.text, known=[q.id for q in open_questions])
    except LLMError as error:
        if error.kind in ("auth", "not_configured"):
            raise
        logger.warning("Session %s: re-ranking skipped: %s", session.pk, error)
        rankings = []
    stored = await _store(session.pk, worker_id, rankings, reply, source_count, meter.lap())
    if stored is None:
        return session
    session, moved = stored
    message = f"Re-ranked the open sub-questions: {moved} moved" if reply else "Re-ranking failed"
    await stages.enter(session.pk, "reflection", message, **steps)
    try:
        await publish(SessionEvent(session.pk, questions=True))
    except Exception:
        logger.exception("Could not publish re-ranking for session %s", session.pk)
    return session
