"""The kept session log's read against the session's length: what each model call pays to
learn that nothing was added to the log, as a session grows from 100 thoughts to 16,000.

    .venv/bin/python -m bench.log_growth            # SQLite (a throwaway file)
    DATABASE_URL=postgres://... .venv/bin/python -m bench.log_growth

Runs one 30-cycle benchmark session against the fake servers, then adds cycles of four
model thoughts as a long session would (each cycle a new number, so earlier ones fall out
of the log's epoch) and, at each size, reads the log through a run's `KeptLog` with nothing
new: the statement that says what changed, and the log assembled from what is kept. It
prints wall and CPU milliseconds per read (the database's own work shows in the wall time
on PostgreSQL, which runs in its own process) and each size's ratio to the first (issue 17,
"The log's count bounded by its epoch"); beside it, the wall time of a thought cycle's
hints read (`transcript.recent_hints`, "Fewer statements per cycle"). On PostgreSQL the thoughts
table is analyzed at each size, as autovacuum would have by then in a real database. A
two-hour session has about 1,000 thoughts.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable
from typing import Any

from . import harness

READS = 300
SIZES = (100, 1_000, 4_000, 16_000)


def _per_read(read: Callable[[], Any]) -> tuple[float, float]:
    """Wall and CPU milliseconds per read, the lower of two runs of READS each."""
    read()
    runs = []
    for _ in range(2):
        wall, cpu = time.perf_counter(), time.thread_time()
        for _ in range(READS):
            read()
        runs.append(
            (
                1000 * (time.perf_counter() - wall) / READS,
                1000 * (time.thread_time() - cpu) / READS,
            )
        )
    return min(runs)


def measure(session_id: uuid.UUID) -> list[tuple[int, float, float, float]]:
    from django.db import connection

    from thinking.models import ThinkingSession, Thought
    from thinking.row_writes import insert_rows
    from thinking.transcript import KeptLog, recent_hints

    session = ThinkingSession.objects.get(pk=session_id)
    last = Thought.objects.filter(session=session).order_by("-cycle").first()
    cycles = itertools.count((last.cycle if last else 0) + 1)
    sequences = itertools.count(1_000_000)
    have = Thought.objects.filter(session=session).count()
    rows = []
    for size in SIZES:
        while have < size:
            cycle = next(cycles)
            thoughts = [
                {
                    "session_id": session_id,
                    "sequence": next(sequences),
                    "cycle": cycle,
                    "text": "The tide's height is limited by the basin's resonance [2]. " * 2,
                    "type": kind,
                    "confidence": 0.6,
                    "parts": {},
                    "reasoning": "",
                    "truncated": False,
                    "time_offset_seconds": float(cycle),
                    "sub_question_id": None,
                }
                for kind in ("exploration", "critique", "connection", "insight")
            ]
            have += insert_rows(Thought, thoughts)
        if connection.vendor == "postgresql":
            # As autovacuum does in a real database once a table has grown: a statement
            # prepared on the server plans from the table's statistics, and keeps its plan
            # until they change. Without it a plan made for 100 thoughts ran at 16,000.
            with connection.cursor() as cursor:
                cursor.execute(f"ANALYZE {Thought._meta.db_table}")
        kept = KeptLog()
        kept.read(session)  # the whole read a run starts with
        wall, cpu = _per_read(lambda kept=kept: kept.read(session))
        hints, _ = _per_read(lambda: recent_hints(session_id))
        rows.append((have, wall, cpu, hints))
    return rows


def show(setup: harness.Setup, session_id: uuid.UUID) -> None:
    print(f"{setup.database}: the kept log's read, nothing new ({READS} each, best of two)")
    print(
        f"{'thoughts':>9} {'wall ms':>8} {'CPU ms':>7} {'wall / first':>13} "
        f"{'hints read, wall ms':>20} {'/ first':>8}"
    )
    rows = measure(session_id)
    first, first_hints = rows[0][1], rows[0][3]
    for have, wall, cpu, hints in rows:
        print(
            f"{have:9d} {wall:8.3f} {cpu:7.3f} {wall / first:12.2f}x "
            f"{hints:20.3f} {hints / first_hints:7.2f}x"
        )


def main() -> None:
    harness.with_benchmark_session("log", show)


if __name__ == "__main__":
    main()
