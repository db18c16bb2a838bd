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

import functools
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import OuterRef
from django.utils import timezone

from config.hops import db_hop

from . import interrupt, parsing, prompts, stages, steps, transcript
from .events import SessionEvent
from .live import publish_safely
from .llm import LLMError, Reply, prompt_message
from .models import SESSION_KEY, Lap, Source, SubQuestion, Synthesis, ThinkingSession, Thought
from .row_reads import Param, aggregate, compiled_values
from .row_writes import update_by_pk
from .run import Run
from .state import StageEntry

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


# Open, and asked by the model: a person's sub-question keeps its place.
OPEN = {"explored": False, "added_by": None}


def _open_rows(session: Any = SESSION_KEY) -> models.QuerySet:
    """The session's open, model-asked rows; `session` names it (a `Param`, an `OuterRef`)."""
    return SubQuestion.objects.filter(session_id=session, **OPEN)


def _counts_query() -> models.QuerySet:
    session = OuterRef("pk")
    counted = (
        ThinkingSession.objects.filter(pk=SESSION_KEY)
        .order_by()
        .annotate(
            n_open=aggregate(_open_rows(session), "COUNT"),
            n_sources=aggregate(Source.objects.filter(session_id=session), "COUNT"),
        )
    )
    return counted.values_list("n_open", "n_sources")


def read_counts(session: ThinkingSession) -> tuple[int, int]:
    """What decides whether a re-ranking is due: open model-asked questions, sources. Read
    after every cycle, so only counted, both in one compiled statement (row_reads.py); the
    material is read when one is due. (0, 0) once the session is deleted."""
    found = compiled_values("rerank:counts", _counts_query, session=session.pk)
    return found[0] if found else (0, 0)


Opened = tuple[int, dict[str, Any] | None]


def due_material(session: ThinkingSession, counts: tuple[int, int]) -> dict[str, Any] | None:
    """A re-ranking's material when one is due by `counts` (as `read_counts` gives them) and
    at least two open questions are left to order; else None."""
    open_count, sources = counts
    if not due(session, source_count=sources, open_count=open_count):
        return None
    material = _material(session)
    # Fewer than two: one explored since the count (when they are not one transaction).
    return material if len(material["open_questions"]) >= 2 else None


def stage_entry(material: dict[str, Any]) -> StageEntry:
    """The stage a re-ranking of `material` enters before its call."""
    return stages.entry(
        "reflection", f"Re-ranking {len(material['open_questions'])} open sub-questions"
    )


def open_reranking(session: ThinkingSession, *, worker_id: str) -> Opened:
    """A re-ranking's reads and its stage, when the step that stored a cycle did not make
    them (`loop._enter_next`): the sources' count, and, when one is due, its material
    (`due_material`), with the stage entered (only while this worker holds the lease).
    None for the material when there is nothing to re-rank, or the session ended."""
    counts = read_counts(session)
    material = due_material(session, counts)
    if material is None or not stages.record_sync(
        session.pk, stage_entry(material), worker_id=worker_id
    ):
        return counts[1], None
    return counts[1], material


# A re-ranking's reads, compiled once per connection (row_reads.py): one is due every few
# cycles, and through the ORM its reads and moves cost as much CPU as a thought cycle's store.


def _shown_questions() -> models.QuerySet:
    rows = _open_rows().order_by("-priority", "created_at")[:MAX_QUESTIONS]
    return rows.values_list("pk", "text", "priority")


def _latest_synthesis() -> models.QuerySet:
    rows = Synthesis.objects.filter(session_id=SESSION_KEY).order_by("-sequence")
    return rows.values_list("text")[:1]


def _recent_thoughts() -> models.QuerySet:
    rows = Thought.objects.filter(session_id=SESSION_KEY, type__in=transcript.MODEL_TYPES)
    return rows.order_by("-sequence").values_list("type", "text", "confidence")[:8]


def _material(session: ThinkingSession) -> dict[str, Any]:
    key = session.pk
    shown = compiled_values("rerank:shown", _shown_questions, session=key)
    latest = compiled_values("rerank:latest-synthesis", _latest_synthesis, session=key)
    recent = compiled_values("rerank:recent-thoughts", _recent_thoughts, session=key)
    return {
        "open_questions": [OpenQuestion(*row) for row in shown],
        "understanding": latest[0][0] if latest else "",
        "recent": [prompts.ThoughtLine(*line) for line in reversed(recent)],
    }


RANKED = ("pk", "priority", "initial_priority", "priority_changes")


def _ranked_rows(count: int) -> Callable[[], models.QuerySet]:
    """The open, model-asked rows among `count` keys (`q0`, `q1`, ...), locked for the
    moves: one read for each count, up to MAX_QUESTIONS."""

    def rows() -> models.QuerySet:
        keys = [Param(f"q{i}", SubQuestion._meta.pk) for i in range(count)]
        found = _open_rows().select_for_update().filter(pk__in=keys).order_by()
        return found.values_list(*RANKED)

    return rows


# One build for each count: a compiled read's name always names the same build.
_ranked = functools.cache(_ranked_rows)


def apply_rankings(session: ThinkingSession, rankings: Sequence[parsing.ParsedRanking]) -> int:
    """Move the priorities of open, model-asked sub-questions (inside the step, which holds
    the session's row); returns how many moved."""
    by_id = {r.question_id: r for r in rankings}
    keys = list(by_id)
    found: list[tuple[Any, ...]] = []
    # A reply ranks at most the MAX_QUESTIONS it was shown: more are read a share at a time.
    for first in range(0, len(keys), MAX_QUESTIONS):
        share = {f"q{i}": pk for i, pk in enumerate(keys[first : first + MAX_QUESTIONS])}
        kind, rows = f"rerank:ranked-{len(share)}", _ranked(len(share))
        found += compiled_values(kind, rows, session=session.pk, **share)
    moved = 0
    for pk, priority, initial_priority, changes in found:
        ranking = by_id[pk]
        if ranking.priority == priority:
            continue
        change = {
            "from": priority,
            "to": ranking.priority,
            "why": ranking.why,
            "cycle": session.cycles,
            "at": timezone.now().isoformat(),
        }
        update_by_pk(
            SubQuestion,
            pk,
            priority=ranking.priority,
            initial_priority=priority if initial_priority is None else initial_priority,
            priority_changes=[*changes, change][-20:],
        )
        moved += 1
    return moved


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
    then: Callable[[ThinkingSession], dict[str, Any]] | None = None,
) -> ThinkingSession | None:
    """The moves, the call, the stage that says how many moved and the checkpoint as one
    step (refused without the lease). None when the session ended meanwhile: nothing is
    written then. `then`: `Step.then`'s hook (the next cycle entered with it)."""
    try:
        with ThinkingSession.step(session_id, worker_id=worker_id, meter=meter) as step:
            session = step.session
            if session.is_finished:
                raise _Ended
            moved = apply_rankings(session, rankings)
            step.update(cycles_at_last_rerank=session.cycles, sources_at_last_rerank=source_count)
            if reply is not None:
                steps.record_calls(step, "rerank", [reply])
            message = (
                f"Re-ranked the open sub-questions: {moved} moved"
                if reply is not None
                else "Re-ranking failed"
            )
            step.update(**stages.record(session, stages.entry("reflection", message)))
            if then is not None:
                step.then(then)
    except _Ended:
        return None
    return step.session


store = db_hop(_store)


async def maybe_rerank(
    *,
    session: ThinkingSession,
    run: Run,
    opened: Opened | None = None,
    stored_by: Callable[..., Awaitable[ThinkingSession | None]] | None = None,
) -> ThinkingSession:
    """Re-rank when due; returns the session as stored. A failed call skips this round (the
    priorities stay as they were) and never stops the thinking. `opened`: its reads, with
    its stage entered and shown, when the hop that stored the cycle made them;
    `stored_by`: the hop that stores it, when not `store` (the loop's, which also enters
    the next cycle: `loop.store_reranked`)."""
    shown = opened is not None  # with the update of the store that entered it
    if opened is None:
        opened = await db_hop(open_reranking)(session, worker_id=run.worker_id)
    source_count, material = opened
    if material is None:
        return session
    if not shown:
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
                system=prompts.SYSTEM,
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
    stored = await (stored_by or store)(
        session.pk, rankings, reply, source_count, worker_id=run.worker_id, meter=run.meter
    )
    if stored is None:
        return session
    # The stages the store entered, and the moves.
    await publish_safely(run.publish, SessionEvent(session.pk, questions=True, plan=True))
    return stored
