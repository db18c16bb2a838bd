"""How fast a render process renders a thought cycle's live update, and what each costs.

    DATABASE_URL=postgres://... .venv/bin/python -m bench.render_rate

Runs one 30-cycle benchmark session against the fake servers, then, with the session back
in its thinking state, renders its thought cycles' updates (each cycle's thoughts, from
what the previous one sent, as the publisher does) three ways: in this process (wall and
CPU per render), through one render process one at a time (the worker's wait per render),
and from eight publishers of the session's updates at once (the render process's
capacity: renders a second with its queue never empty). A render process renders one
update at a time, so its capacity is one over its wall time per render, CPU and the
waits on the database together (issue 17, bench/README.md, "A live update's counts in
one read"). PostgreSQL only: with SQLite renders stay in the worker.
"""

from __future__ import annotations

import asyncio
import time
import uuid

from . import harness

ROUNDS = 3  # each way, alternated; the best kept (the machine's other work only adds)
PUBLISHERS = 8


def _cycles(session_id: uuid.UUID) -> list[tuple[int, ...]]:
    """Each thought cycle's thought sequences, in order."""
    from thinking.models import Thought

    rows = Thought.objects.filter(session_id=session_id).exclude(type="scratchpad")
    by_cycle: dict[int, list[int]] = {}
    for cycle, sequence in rows.order_by("sequence").values_list("cycle", "sequence"):
        by_cycle.setdefault(cycle, []).append(sequence)
    return [tuple(sequences) for sequences in by_cycle.values()]


def measure(session_id: uuid.UUID) -> dict[str, float]:
    from thinking import broadcast, render_process
    from thinking.events import SessionEvent
    from thinking.models import Status, ThinkingSession

    # As while it thinks: a finished session's every update redraws the answer's regions.
    ThinkingSession.objects.filter(pk=session_id).update(status=Status.THINKING)
    events = [SessionEvent(session_id, thoughts=cycle) for cycle in _cycles(session_id)]

    def here() -> tuple[float, float]:
        sent = None
        wall, cpu = time.perf_counter(), time.thread_time()
        for event in events:
            _, sent = broadcast.render_step(event, sent)
        return (
            1000 * (time.perf_counter() - wall) / len(events),
            1000 * (time.thread_time() - cpu) / len(events),
        )

    async def publisher(renders: list[float]) -> None:
        sent = None
        for event in events:
            began = time.perf_counter()
            result = await render_process.run(session_id, broadcast.render_step, event, sent)
            if result is None:
                raise RuntimeError("no render process rendered the update")
            renders.append(time.perf_counter() - began)
            sent = result[1]

    async def in_child(publishers: int) -> tuple[float, float]:
        waits: list[float] = []
        began = time.perf_counter()
        await asyncio.gather(*(publisher(waits) for _ in range(publishers)))
        span = time.perf_counter() - began
        return 1000 * sum(waits) / len(waits), len(waits) / span

    if not render_process.start():
        raise SystemExit("no render process started")
    try:
        here()  # warm: templates, compiled statements
        asyncio.run(in_child(1))
        best: dict[str, float] = {}
        for _ in range(ROUNDS):
            wall, cpu = here()
            alone, _ = asyncio.run(in_child(1))
            _, rate = asyncio.run(in_child(PUBLISHERS))
            for name, value, better in (
                ("here_wall_ms", wall, min),
                ("here_cpu_ms", cpu, min),
                ("child_wait_ms", alone, min),
                ("child_renders_per_s", rate, max),
            ):
                best[name] = better(best.get(name, value), value)
    finally:
        render_process.stop()
    best["updates"] = len(events)
    return best


def show(setup: harness.Setup, session_id: uuid.UUID) -> None:
    if setup.database != "postgresql":
        raise SystemExit("render processes run with PostgreSQL: set DATABASE_URL")
    figures = measure(session_id)
    print(
        f"{setup.database}: {figures['updates']:.0f} thought-cycle updates, "
        f"best of {ROUNDS} alternated rounds\n"
        f"in this process: {figures['here_wall_ms']:.2f} ms wall, "
        f"{figures['here_cpu_ms']:.2f} ms CPU per render\n"
        f"one render process, one update at a time: {figures['child_wait_ms']:.2f} ms waited "
        f"per render\n"
        f"one render process, {PUBLISHERS} publishers at once: "
        f"{figures['child_renders_per_s']:.0f} renders/s"
    )


def main() -> None:
    import os

    os.environ["DEEPTHINK_RENDER_PROCESSES"] = "1"  # before Django's settings are read
    harness.with_benchmark_session("render-rate", show)


if __name__ == "__main__":
    main()
