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
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from django.db import models

from .evidence import evidence_pack
from .models import SESSION_KEY, Source, SubQuestion, Synthesis, ThinkingSession, Thought
from .row_reads import Param, compiled_rows, compiled_values

EPOCH_CYCLES = 30
MAX_SOURCES = 60  # beyond this many, sources are reached through the search tools only
MAX_SUB_QUESTIONS = 60
MODEL_TYPES = ("exploration", "critique", "connection", "insight")


@dataclass(frozen=True)
class _Event:
    at: datetime
    order: int  # ties: sources, then sub-questions, then cycles, then syntheses
    text: str


def _cycle_block(cycle: int, focus: str, thoughts: list[Any]) -> str:
    lines = "\n".join(f"- [{t.type}, {t.confidence:.2f}] {t.text}" for t in thoughts)
    return f"Cycle {cycle + 1}, focus: {focus}\n{lines}"


def epoch_start_for(last_cycle: int) -> int:
    """The first cycle whose thoughts the log carries, given the latest cycle."""
    return (last_cycle // EPOCH_CYCLES) * EPOCH_CYCLES


# The log's reads, each compiled once per connection (thinking/row_reads.py): every model
# call reads the log, and building its five queries through the ORM was about half its CPU.
_EPOCH = Param("epoch", models.PositiveIntegerField())
_FIRST = Param("first", models.DateTimeField())  # when the epoch's first cycle was stored


class LogThought(NamedTuple):
    cycle: int
    type: str
    confidence: float
    text: str
    created_at: datetime
    focus: str | None  # the sub-question's text; None: the session's question


class LogSynthesis(NamedTuple):
    sequence: int
    is_final: bool
    confidence: float
    text: str
    created_at: datetime


class LogQuestion(NamedTuple):
    text: str
    priority: int
    initial_priority: int | None
    created_at: datetime


def _model_thoughts() -> models.QuerySet:
    return Thought.objects.filter(session_id=SESSION_KEY, type__in=MODEL_TYPES)


def _last_cycle() -> models.QuerySet:
    return _model_thoughts().order_by("-cycle").values_list("cycle")[:1]


def _epoch_thoughts() -> models.QuerySet:
    return (
        _model_thoughts()
        .filter(cycle__gte=_EPOCH)
        .order_by("sequence")
        .values_list(*LogThought._fields[:-1], "sub_question__text")
    )


def _syntheses() -> models.QuerySet:
    syntheses = Synthesis.objects.filter(session_id=SESSION_KEY).order_by("sequence")
    return syntheses.values_list(*LogSynthesis._fields)


def _carried_synthesis() -> models.QuerySet:
    """The latest synthesis before the epoch: it carries the earlier ones forward."""
    return _syntheses().filter(created_at__lt=_FIRST).order_by("-sequence")[:1]


def _epoch_syntheses() -> models.QuerySet:
    return _syntheses().filter(created_at__gte=_FIRST)


def _sources() -> models.QuerySet:
    return Source.objects.filter(session_id=SESSION_KEY).order_by("number")[:MAX_SOURCES]


def _questions() -> models.QuerySet:
    questions = SubQuestion.objects.filter(session_id=SESSION_KEY).order_by("created_at", "id")
    return questions.values_list(*LogQuestion._fields)[:MAX_SUB_QUESTIONS]


def session_log(session: ThinkingSession) -> tuple[str, ...]:
    """The session's events so far as prompt blocks, oldest first (synchronous ORM).

    Every model call reads it, so thoughts, syntheses and sub-questions are read as rows of
    the few columns it writes, not model instances (their JSON fields were most of the
    cost)."""
    events: list[_Event] = []
    key = session.pk
    last = compiled_values("log:last-cycle", _last_cycle, session=key)
    epoch_start = epoch_start_for(last[0][0] if last else 0)
    # Only this epoch's rows: every call of a session reads the log, and reading all of a
    # long session's thoughts each time made every call's work (and the peak memory of
    # the database threads, which the allocator keeps) grow with the session.
    thoughts = compiled_values("log:thoughts", _epoch_thoughts, session=key, epoch=epoch_start)
    cycles: dict[int, list[LogThought]] = {}
    for thought in map(LogThought._make, thoughts):
        cycles.setdefault(thought.cycle, []).append(thought)
    if epoch_start and cycles:
        # The latest synthesis before this epoch carries the earlier ones forward.
        first = min(rows[0].created_at for rows in cycles.values())
        found = [
            *compiled_values("log:carried", _carried_synthesis, session=key, first=first),
            *compiled_values("log:epoch-syntheses", _epoch_syntheses, session=key, first=first),
        ]
    else:
        found = compiled_values("log:syntheses", _syntheses, session=key)
    syntheses = list(map(LogSynthesis._make, found))
    for cycle, rows in cycles.items():
        focus = rows[0].focus
        focus = session.question if focus is None else focus
        events.append(_Event(rows[0].created_at, 2, _cycle_block(cycle, focus, rows)))
    for synthesis in syntheses:
        label = "Final answer" if synthesis.is_final else f"Synthesis {synthesis.sequence}"
        text = f"{label} (confidence {synthesis.confidence:.2f}):\n{synthesis.text}"
        events.append(_Event(synthesis.created_at, 3, text))
    # Consecutive rows of one kind (a research batch, one question step) make one block.
    sources = compiled_rows("log:sources", _sources, session=key)
    for batch in _batches(sources, [e.at for e in events]):
        events.append(_Event(batch[0].created_at, 0, evidence_pack(batch)))
    questions = list(
        map(LogQuestion._make, compiled_values("log:questions", _questions, session=key))
    )
    for batch in _batches(questions, [e.at for e in events]):
        # The priority it was added with: re-ranking (rerank.py) must not rewrite a block.
        lines = "\n".join(f"- {q.text} (priority {_added_priority(q)})" for q in batch)
        events.append(_Event(batch[0].created_at, 1, f"Sub-questions added:\n{lines}"))
    events.sort(key=lambda e: (e.at, e.order))
    return tuple(e.text for e in events)


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
