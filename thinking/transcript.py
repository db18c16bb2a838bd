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
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from django.db import models
from django.db.models import OuterRef

from .evidence import evidence_pack
from .models import (
    SESSION_KEY,
    Source,
    SubQuestion,
    Synthesis,
    ThinkingSession,
    Thought,
    ThoughtType,
)
from .row_reads import Param, aggregate, compiled_values

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


# The log's reads, each compiled once per connection (thinking/row_reads.py): every model
# call reads the log, and building its five queries through the ORM was about half its CPU.
_EPOCH = Param("epoch", models.PositiveIntegerField())
_FIRST = Param("first", models.DateTimeField())  # when the epoch's first cycle was stored
_AFTER = Param("after", models.BigIntegerField())  # rows added after this key


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


def _model_thoughts() -> models.QuerySet:
    return Thought.objects.filter(session_id=SESSION_KEY, type__in=MODEL_TYPES)


def _thought_rows(rows: models.QuerySet) -> models.QuerySet:
    return rows.order_by("sequence").values_list(*LogThought._fields[:-1], "sub_question__text")


def _last_cycle() -> models.QuerySet:
    return _model_thoughts().order_by("-cycle").values_list("cycle")[:1]


def _epoch_thoughts() -> models.QuerySet:
    return _thought_rows(_model_thoughts().filter(cycle__gte=_EPOCH))


def _syntheses() -> models.QuerySet:
    syntheses = Synthesis.objects.filter(session_id=SESSION_KEY).order_by("sequence")
    return syntheses.values_list(*LogSynthesis._fields)


def _carried_synthesis() -> models.QuerySet:
    """The latest synthesis before the epoch: it carries the earlier ones forward."""
    return _syntheses().filter(created_at__lt=_FIRST).order_by("-sequence")[:1]


def _epoch_syntheses() -> models.QuerySet:
    return _syntheses().filter(created_at__gte=_FIRST)


def _source_rows(**filters: Any) -> models.QuerySet:
    sources = Source.objects.filter(session_id=SESSION_KEY, **filters).order_by("number")
    return sources.values_list(*LogSource._fields)[:MAX_SOURCES]


def _question_rows(**filters: Any) -> models.QuerySet:
    questions = SubQuestion.objects.filter(session_id=SESSION_KEY, **filters)
    rows = questions.order_by("created_at", "id").values_list(*LogQuestion._fields)
    return rows[:MAX_SUB_QUESTIONS]


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


def _read_rows(key: Any, last_cycle: int | None) -> _Rows:
    """The log's rows, read whole; `last_cycle` is the session's latest (None: no cycle)."""
    epoch_start = epoch_start_for(last_cycle or 0)
    # Only this epoch's rows: every call of a session reads the log, and reading all of a
    # long session's thoughts each time made every call's work (and the peak memory of
    # the database threads, which the allocator keeps) grow with the session.
    found = compiled_values("log:thoughts", _epoch_thoughts, session=key, epoch=epoch_start)
    thoughts = list(map(LogThought._make, found))
    first = _epoch_first(thoughts)
    if epoch_start and first is not None:
        # The latest synthesis before this epoch carries the earlier ones forward.
        found = [
            *compiled_values("log:carried", _carried_synthesis, session=key, first=first),
            *compiled_values("log:epoch-syntheses", _epoch_syntheses, session=key, first=first),
        ]
    else:
        found = compiled_values("log:syntheses", _syntheses, session=key)
    return _Rows(
        epoch_start=epoch_start,
        thoughts=thoughts,
        syntheses=list(map(LogSynthesis._make, found)),
        sources=list(
            map(LogSource._make, compiled_values("log:sources", _source_rows, session=key))
        ),
        questions=list(
            map(LogQuestion._make, compiled_values("log:questions", _question_rows, session=key))
        ),
    )


def session_log(session: ThinkingSession) -> tuple[str, ...]:
    """The session's events so far as prompt blocks, oldest first (synchronous ORM), read
    whole. A run reads it through its `KeptLog`, which reads only what was added since.

    Every model call reads it, so thoughts, syntheses, sources and sub-questions are read as
    rows of the few columns it shows, not model instances (their JSON fields were most of
    the cost)."""
    last = compiled_values("log:last-cycle", _last_cycle, session=session.pk)
    return _assemble(session.question, _read_rows(session.pk, last[0][0] if last else None))


class _Blocks:
    """Block texts by the rows they are drawn from. A kept log passes the blocks its last
    read drew: a block's rows rarely change between calls (new rows make new blocks), and
    drawing them all again (the evidence block above all) was most of an assembly's CPU.
    Only the blocks drawn this time are kept for the next."""

    def __init__(self, drawn_before: dict[tuple[Any, ...], str]) -> None:
        self.before = drawn_before
        self.drawn: dict[tuple[Any, ...], str] = {}

    def text(self, draw: Callable[..., str], *rows: Hashable) -> str:
        """`draw(*rows)`, drawn again only if the last read did not draw it."""
        key = (draw, *rows)
        text = self.before.get(key)
        if text is None:
            text = draw(*rows)
        self.drawn[key] = text
        return text


def _assemble(question: str, rows: _Rows, blocks: _Blocks | None = None) -> tuple[str, ...]:
    blocks = _Blocks({}) if blocks is None else blocks
    events: list[_Event] = []
    cycles: dict[int, list[LogThought]] = {}
    for thought in rows.thoughts:
        cycles.setdefault(thought.cycle, []).append(thought)
    for cycle, thoughts in cycles.items():
        focus = thoughts[0].focus
        focus = question if focus is None else focus
        text = blocks.text(_cycle_block, cycle, focus, tuple(thoughts))
        events.append(_Event(thoughts[0].created_at, 2, text))
    for synthesis in rows.syntheses:
        label = "Final answer" if synthesis.is_final else f"Synthesis {synthesis.sequence}"
        text = f"{label} (confidence {synthesis.confidence:.2f}):\n{synthesis.text}"
        events.append(_Event(synthesis.created_at, 3, text))
    # Consecutive rows of one kind (a research batch, one question step) make one block.
    for batch in _batches(rows.sources, [e.at for e in events]):
        text = blocks.text(evidence_pack, tuple(batch))
        events.append(_Event(batch[0].created_at, 0, text))
    for batch in _batches(rows.questions, [e.at for e in events]):
        text = blocks.text(_questions_block, tuple(batch))
        events.append(_Event(batch[0].created_at, 1, text))
    events.sort(key=lambda e: (e.at, e.order))
    return tuple(e.text for e in events)


# --- the log a run keeps --------------------------------------------------------------------
# A run reads the log before every thoughts, questions and synthesis call: six queries and
# their rows, 2.5-3.4 ms of CPU at 200 cycles (bench/README.md). The loop only ever adds
# rows the log shows, so a run keeps the rows it read and, each time, one statement says
# what changed: per kind of row its count and newest key, the epoch's last cycle and the
# session's `log_edits`. Rows added since are read by key; anything else (a row deleted,
# one edited, a row committed under an older key, a new epoch) reads the whole log again.
# The same statement counts a person's hints, which every thought cycle's prompt shows
# (`KeptLog.hints`): they are read again only when they changed.


RECENT_HINTS = 5


def _recent_hints() -> models.QuerySet:
    rows = Thought.objects.filter(session_id=SESSION_KEY, type=ThoughtType.HINT)
    return rows.order_by("-sequence").values_list("text")[:RECENT_HINTS]


def recent_hints(session_id: Any) -> list[str]:
    """The newest hints a person gave, newest first (every thought cycle's prompt shows them;
    a run reads them through its `KeptLog.hints`)."""
    return [text for (text,) in compiled_values("log:hints", _recent_hints, session=session_id)]


def _marks_query() -> models.QuerySet:
    session = OuterRef("pk")
    model_thoughts = Thought.objects.filter(session_id=session, type__in=MODEL_TYPES)
    kinds = {
        # Only the kept epoch's thoughts are counted: the log shows no others, and counting
        # every thought made each read grow with the session (the (session, cycle) index
        # finds the epoch's rows and the last cycle without walking the rest).
        "thoughts": model_thoughts.filter(cycle__gte=_EPOCH),
        "syntheses": Synthesis.objects.filter(session_id=session),
        "sources": Source.objects.filter(session_id=session),
        "questions": SubQuestion.objects.filter(session_id=session),
    }
    columns: dict[str, Any] = {"last_cycle": aggregate(model_thoughts, "MAX", "cycle")}
    for name, rows in kinds.items():
        columns[f"n_{name}"] = aggregate(rows, "COUNT")
        columns[f"newest_{name}"] = aggregate(rows, "MAX")
    # The hints found by the (session, type, sequence) index; the newest by its key, which
    # is never given again (a sequence is, after the top thought is deleted in the admin).
    hints = Thought.objects.filter(session_id=session, type=ThoughtType.HINT)
    columns |= {"n_hints": aggregate(hints, "COUNT"), "newest_hints": aggregate(hints, "MAX")}
    marks = ThinkingSession.objects.filter(pk=SESSION_KEY).order_by().annotate(**columns)
    return marks.values_list(*_Marks._fields)


class _Marks(NamedTuple):
    log_edits: int
    last_cycle: int | None
    n_thoughts: int  # model thoughts from the kept epoch's first cycle on
    newest_thoughts: int | None
    n_syntheses: int
    newest_syntheses: int | None
    n_sources: int
    newest_sources: int | None
    n_questions: int
    newest_questions: int | None
    n_hints: int
    newest_hints: int | None


def _new_thoughts() -> models.QuerySet:
    return _thought_rows(_model_thoughts().filter(pk__gt=_AFTER, cycle__gte=_EPOCH))


def _new_syntheses() -> models.QuerySet:
    return _syntheses().filter(pk__gt=_AFTER)


def _new_sources() -> models.QuerySet:
    return _source_rows(pk__gt=_AFTER)


def _new_questions() -> models.QuerySet:
    return _question_rows(pk__gt=_AFTER)


_NEW = {  # kind of row: its read of rows added since, and how a row is made
    "thoughts": (_new_thoughts, LogThought._make),
    "syntheses": (_new_syntheses, LogSynthesis._make),
    "sources": (_new_sources, LogSource._make),
    "questions": (_new_questions, LogQuestion._make),
}


def _added(key: Any, kind: str, was: _Marks, now: _Marks, epoch: int) -> list[Any] | None:
    """The rows of one kind added since `was` (thoughts: of the epoch from `epoch` on, as
    the marks count them): none if its count and newest key are the same; None if more
    changed than rows added (one deleted, or committed under an older key), or more were
    added than a read of new rows gives (its LIMIT)."""
    count, newest = getattr(now, f"n_{kind}"), getattr(now, f"newest_{kind}")
    count_was, newest_was = getattr(was, f"n_{kind}"), getattr(was, f"newest_{kind}")
    if (count, newest) == (count_was, newest_was):
        return []
    build, make = _NEW[kind]
    bounds = {"after": newest_was or 0, **({"epoch": epoch} if kind == "thoughts" else {})}
    found = compiled_values(f"log:new-{kind}", build, session=key, **bounds)
    return list(map(make, found)) if count_was + len(found) == count else None


def _merged[R: tuple](rows: list[R], added: list[R], order: Callable[[R], Any]) -> list[R]:
    """`rows` with `added`, each key once (a row committed between a whole read and the
    statement before it is in both), in the log's order."""
    if not added:
        return rows
    by_key = {row[0]: row for row in rows}
    by_key.update((row[0], row) for row in added)
    return sorted(by_key.values(), key=order)


def _updated(key: Any, rows: _Rows, was: _Marks, now: _Marks) -> _Rows | None:
    """`rows` with the rows added since `was`, or None if the log must be read whole."""
    if now.log_edits != was.log_edits or epoch_start_for(now.last_cycle or 0) != rows.epoch_start:
        return None
    added: dict[str, list[Any]] = {}
    for kind in _NEW:  # a kind that needs a whole read spares the others' reads
        found = _added(key, kind, was, now, rows.epoch_start)
        if found is None:
            return None
        added[kind] = found
    new_thoughts, new_syntheses = added["thoughts"], added["syntheses"]
    # New thoughts are the epoch's only: they are read from its first cycle on.
    thoughts = _merged(rows.thoughts, new_thoughts, order=lambda t: t.sequence)
    if rows.epoch_start and (new_thoughts or new_syntheses):  # past the first epoch, new rows
        first = _epoch_first(rows.thoughts)
        if new_thoughts and _epoch_first(thoughts) != first:
            return None  # a new thought stored earlier than the epoch's start: read whole
        if any(first is None or s.created_at < first for s in new_syntheses):
            return None  # a synthesis came before the epoch's start: read whole
    sources = _merged(rows.sources, added["sources"], order=lambda s: s.number)
    questions = _merged(rows.questions, added["questions"], order=lambda q: (q.created_at, q.pk))
    return _Rows(
        epoch_start=rows.epoch_start,
        thoughts=thoughts,
        syntheses=_merged(rows.syntheses, new_syntheses, order=lambda s: s.sequence),
        sources=sources[:MAX_SOURCES],
        questions=questions[:MAX_SUB_QUESTIONS],
    )


class KeptLog:
    """One session's log as a run keeps it between calls (the run's hops are sequential, so
    it is never read by two threads at once). `read` gives what `session_log` gives."""

    def __init__(self) -> None:
        self._rows: _Rows | None = None
        self._marks: _Marks | None = None
        self._source_count: int | None = None
        self._blocks: dict[tuple[Any, ...], str] = {}
        self._hints: tuple[tuple[int, int, int | None] | None, list[str]] | None = None

    def read(self, session: ThinkingSession) -> tuple[str, ...]:
        """The log (synchronous ORM): one statement, then only the rows added since."""
        key = session.pk
        epoch = 0 if self._rows is None else self._rows.epoch_start
        found = compiled_values("log:marks", _marks_query, session=key, epoch=epoch)
        marks = _Marks._make(found[0]) if found else None  # None: the session was deleted
        rows = None
        if self._rows is not None and self._marks is not None and marks is not None:
            rows = _updated(key, self._rows, self._marks, marks)
        if rows is None:
            self._rows = rows = _read_rows(key, None if marks is None else marks.last_cycle)
            if marks is not None:
                # The marks counted the thoughts from `epoch` on; the next read counts them
                # from this read's epoch, whose rows are all here.
                newest = max((t.pk for t in rows.thoughts), default=None)
                marks = marks._replace(n_thoughts=len(rows.thoughts), newest_thoughts=newest)
        else:
            self._rows = rows
        self._marks = marks
        self._source_count = 0 if marks is None else marks.n_sources
        blocks = _Blocks(self._blocks)
        log = _assemble(session.question, self._rows, blocks)
        self._blocks = blocks.drawn
        return log

    def hints(self, session_id: Any) -> list[str]:
        """The newest hints (`recent_hints`), read again only when the last `read`'s marks
        say one was added, deleted or edited since they were (an edit bumps `log_edits`)."""
        if self._source_count is None:
            raise RuntimeError("the log has not been read")
        marks = self._marks
        key = None if marks is None else (marks.log_edits, marks.n_hints, marks.newest_hints)
        if self._hints is None or key is None or self._hints[0] != key:
            self._hints = (key, recent_hints(session_id))
        return self._hints[1]

    @property
    def source_count(self) -> int:
        """The session's sources when the log was last read."""
        if self._source_count is None:
            raise RuntimeError("the log has not been read")
        return self._source_count


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
