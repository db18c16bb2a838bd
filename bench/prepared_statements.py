"""Wall time and CPU of the compiled statements a step and a live update run, bound on the
client (PostgreSQL parses and plans each run) against prepared on the server (parsed and
planned once per connection).

    DATABASE_URL=postgres://... .venv/bin/python -m bench.prepared_statements

Runs one 30-cycle benchmark session against the fake servers, then runs each statement
both ways on the same connection, side by side: its kept runner made anew with
`DATABASE_PREPARED_STATEMENTS` off (bound on the client, as Django's own cursors are and
as these were before), then on. Prints wall and CPU milliseconds per run, the lower of
two alternations (the database's own work shows in the wall time: PostgreSQL runs in its
own process) and the ratio (issue 17, "Compiled statements prepared on the server").
PostgreSQL only: SQLite keeps its own statement cache.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable
from typing import Any

from . import harness
from .row_read_cost import a_cycles_thoughts

RUNS = 300


def _per_run(run: Callable[[], Any]) -> tuple[float, float]:
    """Wall and CPU milliseconds per run, after a few runs to warm up (the statement is
    prepared on the first)."""
    for _ in range(6):
        run()
    wall, cpu = time.perf_counter(), time.thread_time()
    for _ in range(RUNS):
        run()
    return (
        1000 * (time.perf_counter() - wall) / RUNS,
        1000 * (time.thread_time() - cpu) / RUNS,
    )


def measure(session_id: uuid.UUID) -> list[tuple[str, tuple[float, float], tuple[float, float]]]:
    from django.db import DEFAULT_DB_ALIAS, connections, transaction
    from django.db.models import F
    from django.test.utils import override_settings
    from django.utils import timezone
    from thinking.row_reads import read_by_pk, values_among
    from thinking.row_writes import insert_rows, update_by_pk

    from thinking.models import Source, ThinkingSession, Thought
    from thinking.transcript import KeptLog

    connection = connections[DEFAULT_DB_ALIAS]
    session = ThinkingSession.objects.get(pk=session_id)
    kept = KeptLog()
    kept.read(session)
    cited = list(Source.objects.filter(session_id=session_id).values_list("number", flat=True))
    cited = cited[:3]

    def locked() -> None:
        with transaction.atomic():
            read_by_pk(ThinkingSession, session_id, for_update=True)

    def cycle_stored() -> None:
        now = timezone.now()
        update_by_pk(
            ThinkingSession,
            session_id,
            revision=F("revision") + 1,
            heartbeat_at=now,
            active_seconds=F("active_seconds") + 0.01,
            running_since=now,
            cycles=F("cycles") + 1,
            input_tokens=F("input_tokens") + 1200,
        )

    sequences = itertools.count(200_000)

    def cycle_thoughts() -> None:
        insert_rows(Thought, a_cycles_thoughts(session_id, sequences))

    cases: list[tuple[str, Callable[[], Any]]] = [
        ("the session row", lambda: read_by_pk(ThinkingSession, session_id)),
        ("the row locked, in its transaction", locked),
        ("the session log, nothing new", lambda: kept.read(session)),
        (
            "three cited sources' passages",
            lambda: values_among(Source, "session_id", session_id, "number", cited, "snippet"),
        ),
        ("UPDATE: a thought cycle", cycle_stored),
        ("INSERT: a cycle's four thoughts", cycle_thoughts),
    ]

    def run_as(prepared: bool, run: Callable[[], Any]) -> tuple[float, float]:
        connection.__dict__.pop("_deepthink_runner", None)  # made anew for the mode
        with override_settings(DATABASE_PREPARED_STATEMENTS=prepared):
            return _per_run(run)

    rows = []
    try:
        for label, run in cases:
            # Alternated twice, the lower of each kept: the machine's other work only adds.
            bound, prepared = [], []
            for _ in range(2):
                bound.append(run_as(False, run))
                prepared.append(run_as(True, run))
            rows.append((label, min(bound), min(prepared)))
    finally:
        connection.__dict__.pop("_deepthink_runner", None)
    return rows


def show(setup: harness.Setup, session_id: uuid.UUID) -> None:
    if setup.database != "postgresql":
        raise SystemExit("prepared statements are PostgreSQL's: set DATABASE_URL")
    print(f"{setup.database}: ms per run ({RUNS} each, best of alternated runs)")
    print(
        f"{'statement':36} {'bound wall':>10} {'prepared':>9} {'ratio':>6}   CPU: bound, prepared"
    )
    for label, (bwall, bcpu), (pwall, pcpu) in measure(session_id):
        print(
            f"{label:36} {bwall:10.3f} {pwall:9.3f} {bwall / pwall:5.2f}x   {bcpu:.3f}, {pcpu:.3f}"
        )


def main() -> None:
    harness.with_benchmark_session("prepared", show)


if __name__ == "__main__":
    main()
