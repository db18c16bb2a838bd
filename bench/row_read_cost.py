"""CPU of the reads every stored step and live update make, of the UPDATE every step ends
with, and of the INSERTs of its rows: the ORM against `row_reads` and `row_writes`.

    .venv/bin/python -m bench.row_read_cost            # SQLite (a throwaway file)
    DATABASE_URL=postgres://... .venv/bin/python -m bench.row_read_cost

Runs one 30-cycle benchmark session against the fake servers (so the rows are a real
session's: ~75 stage entries, 100 thoughts, sub-questions and sources), then reads it back
each way, side by side, and prints CPU milliseconds per read (or write) and the ratio
(issue 17, "The session row, compiled once", "The step's UPDATE, compiled once", "A step's
rows inserted without the ORM"). Two rows compare one statement run on a new cursor with
the connection's kept one ("One cursor per connection"), and a whole read of the session log
with a run's kept log when nothing was added ("The session log kept by the run"). The reads
come first: the writes add thousands of rows to the session. A plan's sources are inserted
with their keys read back, as a plan's research stores them ("A plan's sources inserted
without the ORM").
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from . import harness

READS = 1000


def cpu_ms(read: Callable[[], Any], count: int = READS) -> float:
    read()
    started = time.thread_time()
    for _ in range(count):
        read()
    return 1000 * (time.thread_time() - started) / count


def a_cycles_thoughts(session_id: uuid.UUID, sequences: Iterator[int]) -> list[dict[str, Any]]:
    """A thought cycle's four rows, as steps._store_thoughts writes them, numbered from
    `sequences`."""
    return [
        {
            "session_id": session_id,
            "sequence": next(sequences),
            "cycle": 7,
            "text": "The tide's height is limited by the basin's resonance [2]. " * 4,
            "type": "analysis",
            "confidence": 0.7,
            "parts": {"route": "tags", "thoughts": [{"type": "analysis"}]},
            "reasoning": "",
            "truncated": False,
            "time_offset_seconds": 12.5,
            "sub_question_id": None,
        }
        for _ in range(4)
    ]


def measure(session_id: uuid.UUID) -> list[tuple[str, float, float]]:
    from django.db import DEFAULT_DB_ALIAS, connections, transaction
    from django.db.models import F
    from django.utils import timezone
    from thinking.row_reads import _all_rows, read_by_pk, run_statement, values_by
    from thinking.row_writes import insert_rows, inserted_rows, update_by_pk

    from thinking.models import ModelCall, Source, SubQuestion, ThinkingSession, Thought
    from thinking.transcript import KeptLog, session_log

    progress = ThinkingSession.objects.get(pk=session_id).progress

    def checkpoint(**changes: Any) -> Callable[[], dict[str, Any]]:
        """A step's checkpoint (`models._open_step`) with the step's own changes."""

        def build() -> dict[str, Any]:
            now = timezone.now()
            return {
                "revision": F("revision") + 1,
                "heartbeat_at": now,
                "active_seconds": F("active_seconds") + 0.01,
                "running_since": now,
                **changes,
            }

        return build

    # A stage entered counts its row and sets the progress line (stages.record); a thought
    # cycle adds to counters.
    stage_entered = checkpoint(stage_count=F("stage_count") + 1, progress=progress)
    cycle_stored = checkpoint(
        input_tokens=F("input_tokens") + 1200,
        output_tokens=F("output_tokens") + 300,
        cache_read_tokens=F("cache_read_tokens") + 0,
        cache_write_tokens=F("cache_write_tokens") + 0,
        parse_routes={"tags": 12},
        cycles=F("cycles") + 1,
        focus="What limits the tide's height?",
    )

    def orm_update(changes: Callable[[], dict[str, Any]]) -> Callable[[], Any]:
        return lambda: ThinkingSession.objects.filter(pk=session_id).update(**changes())

    def compiled_update(changes: Callable[[], dict[str, Any]]) -> Callable[[], Any]:
        return lambda: update_by_pk(ThinkingSession, session_id, **changes())

    def locked_orm() -> None:
        with transaction.atomic():
            ThinkingSession.objects.select_for_update().get(pk=session_id)

    def locked_compiled() -> None:
        with transaction.atomic():
            read_by_pk(ThinkingSession, session_id, for_update=True)

    sequences = itertools.count(100_000)

    def cycle_thoughts() -> list[dict[str, Any]]:
        return a_cycles_thoughts(session_id, sequences)

    # A plan's research stored together (evidence._store_found): 3 web queries' five pages
    # and 3 knowledge-base queries' three passages each.
    source_numbers = itertools.count(100_000)

    def plan_sources() -> list[dict[str, Any]]:
        return [
            {
                "session_id": session_id,
                "number": (number := next(source_numbers)),
                "kind": "web" if i < 15 else "memory",
                "title": "Tides and resonance, a review",
                "url": f"https://example.com/tides/{number}",
                "snippet": "The basin's resonance sets the tide's height. " * 20,
                "score": 0.5,
                "query": "what limits the tide's height",
                "key": f"https://example.com/tides/{number}",
                "found_by": "plan",
            }
            for i in range(24)
        ]

    call = {
        "session_id": session_id,
        "purpose": "thoughts",
        "model": "claude-test",
        "thinking_mode": "adaptive",
        "stop_reason": "end_turn",
        "duration_ms": 900,
        "input_tokens": 5000,
        "output_tokens": 700,
        "cache_read_tokens": 4000,
        "cache_write_tokens": 0,
        "content": [{"type": "text", "text": "Thoughts. " * 60}],
    }

    def orm_insert(model: Any, rows: Callable[[], list[dict[str, Any]]]) -> Callable[[], Any]:
        return lambda: model.objects.bulk_create([model(**row) for row in rows()])

    def compiled_insert(model: Any, rows: Callable[[], list[dict[str, Any]]]) -> Callable[[], Any]:
        return lambda: insert_rows(model, rows())

    def orm_inserted(model: Any, rows: Callable[[], list[dict[str, Any]]]) -> Callable[[], Any]:
        def insert() -> list[Any]:
            made = [model(**row) for row in rows()]
            model.objects.bulk_create(made)
            return made

        return insert

    def compiled_inserted(
        model: Any, rows: Callable[[], list[dict[str, Any]]]
    ) -> Callable[[], Any]:
        return lambda: inserted_rows(model, rows())

    questions = ("pk", "parent_id", "explored", "priority")
    session = ThinkingSession.objects.get(pk=session_id)
    kept = KeptLog()

    # One small statement (the source numbers), run through a new cursor of Django's each
    # time (before 2026-11-26, twelfth sitting) against the connection's kept one.
    connection = connections[DEFAULT_DB_ALIAS]
    numbers = Source.objects.filter(session_id=session_id).order_by().values_list("number")
    sql, params = numbers.query.sql_with_params()

    def new_cursor() -> list[Any]:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall()

    def kept_cursor() -> list[Any]:
        return run_statement(connection, sql, params, _all_rows)

    pairs: list[tuple[str, Callable[[], Any], Callable[[], Any]]] = [
        (
            "the session row",
            lambda: ThinkingSession.objects.get(pk=session_id),
            lambda: read_by_pk(ThinkingSession, session_id),
        ),
        ("the row locked, in its transaction", locked_orm, locked_compiled),
        (
            "the source numbers",
            lambda: set(
                Source.objects.filter(session_id=session_id).values_list("number", flat=True)
            ),
            lambda: set(values_by(Source, "session_id", session_id, "number")),
        ),
        (
            "the sub-questions' states",
            lambda: list(
                SubQuestion.objects.filter(session_id=session_id).order_by().values_list(*questions)
            ),
            lambda: values_by(SubQuestion, "session_id", session_id, *questions),
        ),
        # Not the ORM against compiled: the same statement on a new cursor and the kept one.
        ("a statement: a new cursor | kept", new_cursor, kept_cursor),
        # Not the ORM against compiled: a whole read of the log (both compiled) against the
        # run's kept log when nothing was added (one statement, then the log assembled).
        ("the session log: whole | kept", lambda: session_log(session), lambda: kept.read(session)),
        (
            "UPDATE: a stage entered",
            orm_update(stage_entered),
            compiled_update(stage_entered),
        ),
        ("UPDATE: a thought cycle", orm_update(cycle_stored), compiled_update(cycle_stored)),
        (
            "INSERT: a cycle's four thoughts",
            orm_insert(Thought, cycle_thoughts),
            compiled_insert(Thought, cycle_thoughts),
        ),
        (
            "INSERT: a plan's 24 sources, keys back",
            orm_inserted(Source, plan_sources),
            compiled_inserted(Source, plan_sources),
        ),
        (
            "INSERT: a model call",
            orm_insert(ModelCall, lambda: [call]),
            compiled_insert(ModelCall, lambda: [call]),
        ),
    ]
    rows = []
    for label, orm, compiled in pairs:
        # Alternated twice, the lower of each kept: the machine's other work only adds.
        orm_ms = min(cpu_ms(orm), cpu_ms(orm))
        compiled_ms = min(cpu_ms(compiled), cpu_ms(compiled))
        rows.append((label, orm_ms, compiled_ms))
    return rows


def show(setup: harness.Setup, session_id: uuid.UUID) -> None:
    print(f"{setup.database}: CPU ms per read or write ({READS} each, best of two)")
    print(f"{'read':38} {'ORM':>7} {'compiled':>9} {'ratio':>6}")
    for label, orm_ms, compiled_ms in measure(session_id):
        print(f"{label:38} {orm_ms:7.3f} {compiled_ms:9.3f} {orm_ms / compiled_ms:5.1f}x")


def main() -> None:
    harness.with_benchmark_session("rows", show)


if __name__ == "__main__":
    main()
