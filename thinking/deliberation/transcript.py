"""The session so far, as an append-only list of prompt blocks (for the prompt cache).

Every model call of a session sends what happened so far — sources as they were found,
each thought cycle, each synthesis, sub-questions as they were added — in the order it
happened. A block, once written, never changes, and new events only ever add blocks at
the end, so each call's prompt is the previous call's prompt plus a few new blocks: the
API reads the old part from its cache and only the new blocks (and a short task at the end)
are paid in full. Long sessions start a new epoch every EPOCH_CYCLES cycles (the latest
synthesis carries the earlier ones forward), which keeps the prompt bounded.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from django.db.models import Max

from thinking.deliberation.evidence import evidence_pack
from thinking.models import (
    Source,
    SubQuestion,
    Synthesis,
    ThinkingSession,
    Thought,
    ThoughtType,
)

EPOCH_CYCLES = 30
MAX_SOURCES = 60  # beyond this many, sources are reached through the search tools only
MAX_SUB_QUESTIONS = 60
MODEL_TYPES = ("exploration", "critique", "connection", "insight")


@dataclass(frozen=True)
class _Event:
    at: datetime
    order: int  # ties: sources, then sub-questions, then cycles, then syntheses
    text: str


def _cycle_block(cycle: int, focus: str, thoughts: Sequence[Any]) -> str:
    lines = "\n".join(f"- [{t.type}, {t.confidence:.2f}] {t.text}" for t in thoughts)
    return f"Cycle {cycle + 1}, focus: {focus}\n{lines}"


def _questions_block(questions: Sequence[Any]) -> str:
    # The priority it was added with: re-ranking (rerank.py) must not rewrite a block.
    lines = "\n".join(f"- {q.text} (priority {_added_priority(q)})" for q in questions)
    return f"Sub-questions added:\n{lines}"


def epoch_start_for(last_cycle: int) -> int:
    """The first cycle whose thoughts the log carries, given the latest cycle."""
    return (last_cycle // EPOCH_CYCLES) * EPOCH_CYCLES


class LogThought(NamedTuple):
    pk: int
    sequence: int
    cycle: int
    type: str
    confidence: float
    text: str
    created_at: datetime
    focus: str | None  # the sub-question's text; None: the session's question


class LogSynthesis(NamedTuple):
    pk: int
    sequence: int
    is_final: bool
    confidence: float
    text: str
    created_at: datetime


class LogSource(NamedTuple):
    """What a prompt shows of a source (evidence.evidence_pack)."""

    pk: int
    number: int
    kind: str
    title: str
    url: str
    snippet: str
    created_at: datetime


class LogQuestion(NamedTuple):
    pk: int
    text: str
    priority: int
    initial_priority: int | None
    created_at: datetime


@dataclass(frozen=True)
class _Rows:
    """What the log is made from: the epoch's model thoughts (by sequence), the syntheses it
    shows (by sequence), the first sources (by number) and sub-questions (by creation)."""

    epoch_start: int
    thoughts: list[LogThought]
    syntheses: list[LogSynthesis]
    sources: list[LogSource]
    questions: list[LogQuestion]


def _epoch_first(thoughts: list[LogThought]) -> datetime | None:
    """When the epoch's first cycle was stored: the earliest first thought of its cycles."""
    firsts: dict[int, datetime] = {}
    for thought in thoughts:
        firsts.setdefault(thought.cycle, thought.created_at)
    return min(firsts.values(), default=None)


def _read_rows(session_id: Any) -> _Rows:
    """The log's rows. Only the current epoch's thoughts are read (the (session, cycle)
    index finds them), so a call's reads do not grow with the session."""
    model_thoughts = Thought.objects.filter(session_id=session_id, type__in=MODEL_TYPES)
    last_cycle = model_thoughts.aggregate(last=Max("cycle"))["last"]
    epoch_start = epoch_start_for(last_cycle or 0)
    found = (
        model_thoughts.filter(cycle__gte=epoch_start)
        .order_by("sequence")
        .values_list(*LogThought._fields[:-1], "sub_question__text")
    )
    thoughts = [LogThought(*row) for row in found]
    syntheses = Synthesis.objects.filter(session_id=session_id).order_by("sequence")
    synthesis_rows = syntheses.values_list(*LogSynthesis._fields)
    first = _epoch_first(thoughts)
    if epoch_start and first is not None:
        # The latest synthesis before this epoch carries the earlier ones forward.
        carried = synthesis_rows.filter(created_at__lt=first).order_by("-sequence")[:1]
        shown = [*carried, *synthesis_rows.filter(created_at__gte=first)]
    else:
        shown = list(synthesis_rows)
    sources = Source.objects.filter(session_id=session_id).order_by("number")
    questions = SubQuestion.objects.filter(session_id=session_id).order_by("created_at", "id")
    return _Rows(
        epoch_start=epoch_start,
        thoughts=thoughts,
        syntheses=[LogSynthesis(*row) for row in shown],
        sources=[LogSource(*row) for row in sources.values_list(*LogSource._fields)[:MAX_SOURCES]],
        questions=[
            LogQuestion(*row)
            for row in questions.values_list(*LogQuestion._fields)[:MAX_SUB_QUESTIONS]
        ],
    )


def session_log(session: ThinkingSession) -> tuple[str, ...]:
    """The session's events so far as prompt blocks, oldest first (synchronous ORM). Every
    model call reads it: rows of the few columns it shows, not model instances."""
    return _assemble(session.question, _read_rows(session.pk))


def _assemble(question: str, rows: _Rows) -> tuple[str, ...]:
    events: list[_Event] = []
    cycles: dict[int, list[LogThought]] = {}
    for thought in rows.thoughts:
        cycles.setdefault(thought.cycle, []).append(thought)
    for cycle, thoughts in cycles.items():
        focus = thoughts[0].focus
        text = _cycle_block(cycle, question if focus is None else focus, thoughts)
        events.append(_Event(thoughts[0].created_at, 2, text))
    for synthesis in rows.syntheses:
        label = "Final answer" if synthesis.is_final else f"Synthesis {synthesis.sequence}"
        text = f"{label} (confidence {synthesis.confidence:.2f}):\n{synthesis.text}"
        events.append(_Event(synthesis.created_at, 3, text))
    # Consecutive rows of one kind (a research batch, one question step) make one block.
    for batch in _batches(rows.sources, [e.at for e in events]):
        events.append(_Event(batch[0].created_at, 0, evidence_pack(batch)))
    for batch in _batches(rows.questions, [e.at for e in events]):
        events.append(_Event(batch[0].created_at, 1, _questions_block(batch)))
    events.sort(key=lambda e: (e.at, e.order))
    return tuple(e.text for e in events)


RECENT_HINTS = 5


def recent_hints(session_id: Any) -> list[str]:
    """The newest hints a person gave, newest first (every thought cycle's prompt shows
    them), found by the (session, type, sequence) index."""
    hints = Thought.objects.filter(session_id=session_id, type=ThoughtType.HINT)
    return list(hints.order_by("-sequence").values_list("text", flat=True)[:RECENT_HINTS])


def _added_priority(question: Any) -> int:
    return question.priority if question.initial_priority is None else question.initial_priority


def _batches(rows: list[Any], boundaries: list[datetime]) -> list[list[Any]]:
    """Split rows (in creation order) wherever another event happened between two of them."""
    batches: list[list[Any]] = []
    marks = sorted(boundaries)
    for row in rows:
        if batches:
            # The first event after the previous row: does it come before this one?
            after = bisect.bisect_right(marks, batches[-1][-1].created_at)
            if after == len(marks) or marks[after] > row.created_at:
                batches[-1].append(row)
                continue
        batches.append([row])
    return batches
