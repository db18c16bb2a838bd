"""The session log every model call carries (thinking/deliberation/transcript.py): what happened, in
the order it happened, as blocks that never change once written, so that the prompt cache reads
all but the newest blocks. A long session starts a new epoch every EPOCH_CYCLES cycles: the
log then carries the latest synthesis from before the epoch and only the epoch's cycles."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.db.models.signals import post_init
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from thinking.deliberation import transcript
from thinking.models import Source, SubQuestion, Synthesis, Thought

pytestmark = pytest.mark.django_db

START = timezone.now() - timedelta(days=1)


def at(minute: int) -> Any:
    return START + timedelta(minutes=minute)


def stamp(model: Any, pk: int, minute: int) -> None:
    model.objects.filter(pk=pk).update(created_at=at(minute))


def add_cycle(session: Any, cycle: int, minute: int, *, sub: SubQuestion | None = None) -> None:
    for n in range(2):
        thought = Thought.objects.create(
            session=session,
            sequence=cycle * 10 + n,
            cycle=cycle,
            text=f"thought {cycle}.{n}",
            type="insight" if n else "exploration",
            confidence=0.5,
            time_offset_seconds=float(minute),
            sub_question=sub,
        )
        stamp(Thought, thought.pk, minute)


def add_synthesis(session: Any, sequence: int, minute: int) -> None:
    synthesis = Synthesis.objects.create(
        session=session, sequence=sequence, text=f"understanding {sequence}", confidence=0.6,
        time_offset_seconds=float(minute),
    )  # fmt: skip
    stamp(Synthesis, synthesis.pk, minute)


def test_a_short_session_is_logged_in_order(make_session: Any):
    session = make_session(question="Why is the sky blue?")
    for number in (1, 2):
        source = Source.objects.create(
            session=session, number=number, kind="web", title=f"S{number}", url=f"https://e.com/{number}",
            snippet=f"passage {number}", key=f"k{number}",
        )  # fmt: skip
        stamp(Source, source.pk, 0)
    sub = SubQuestion.objects.create(session=session, text="What about sunsets?", priority=7)
    stamp(SubQuestion, sub.pk, 2)
    add_cycle(session, 0, 1)
    add_cycle(session, 1, 3, sub=sub)
    add_synthesis(session, 0, 4)
    # A hint from the person watching is not the model's thought: not in the log.
    Thought.objects.create(
        session=session, sequence=99, text="mind the ocean", type="hint", confidence=1.0,
        time_offset_seconds=5.0,
    )  # fmt: skip

    log = transcript.session_log(session)

    assert len(log) == 5
    assert log[0].count("<source ") == 2, "one research batch, one block"
    assert 'title="S1"' in log[0] and 'title="S2"' in log[0]
    assert log[1] == (
        "Cycle 1, focus: Why is the sky blue?\n"
        "- [exploration, 0.50] thought 0.0\n- [insight, 0.50] thought 0.1"
    )
    assert log[2] == "Sub-questions added:\n- What about sunsets? (priority 7)"
    assert log[3].startswith("Cycle 2, focus: What about sunsets?\n")
    assert log[4] == "Synthesis 0 (confidence 0.60):\nunderstanding 0"
    assert "mind the ocean" not in "".join(log)


def test_a_long_session_logs_only_the_current_epoch_and_the_synthesis_before_it(
    make_session: Any,
):
    session = make_session()
    epoch = transcript.EPOCH_CYCLES
    for cycle in range(epoch + 3):
        add_cycle(session, cycle, minute=cycle * 2)
        if cycle % 10 == 9:
            add_synthesis(session, cycle // 10, minute=cycle * 2 + 1)
    # Syntheses 0, 1 and 2 came before the epoch's first cycle; 3 after it.
    add_synthesis(session, 3, minute=(epoch + 1) * 2 + 1)

    log = transcript.session_log(session)

    assert log[0] == "Synthesis 2 (confidence 0.60):\nunderstanding 2", "carries the rest"
    cycles = [block.split(",")[0] for block in log if block.startswith("Cycle ")]
    assert cycles == [f"Cycle {n}" for n in range(epoch + 1, epoch + 4)]
    assert "Synthesis 3 (confidence 0.60):\nunderstanding 3" in log
    assert not any(f"understanding {n}" in block for n in (0, 1) for block in log)
    assert transcript.epoch_start_for(epoch + 2) == epoch


def test_the_log_only_grows_while_an_epoch_lasts(make_session: Any):
    """What the prompt cache needs: each call's log begins with the previous call's blocks."""
    session = make_session()
    before = transcript.session_log(session)
    for cycle in range(6):
        add_cycle(session, cycle, minute=cycle)
        if cycle == 3:
            add_synthesis(session, 0, minute=cycle)
        now = transcript.session_log(session)
        assert now[: len(before)] == before
        assert len(now) > len(before)
        before = now


CYCLES = 2 * transcript.EPOCH_CYCLES + 5  # two whole epochs behind, five cycles into the third


def long_session(make_session: Any) -> Any:
    """Two thoughts a cycle, thought n stored at minute n; syntheses at minutes 50 (first
    epoch), 100 (second) and 125 (third, after cycle 62's thoughts)."""
    session = make_session(question="Why?")
    start = timezone.now() - timedelta(days=1)
    thoughts = [
        Thought(
            session=session,
            sequence=n,
            cycle=n // 2,
            text=f"thought {n}",
            type="exploration",
            confidence=0.5,
            time_offset_seconds=n,
        )
        for n in range(2 * CYCLES)
    ]
    Thought.objects.bulk_create(thoughts)
    for n in range(2 * CYCLES):  # auto_now_add ignores a given time: set it afterwards
        Thought.objects.filter(session=session, sequence=n).update(
            created_at=start + timedelta(minutes=n)
        )
    for sequence, minute in ((1, 50), (2, 100), (3, 125)):
        synthesis = Synthesis.objects.create(
            session=session,
            sequence=sequence,
            text=f"understanding {sequence}",
            confidence=0.5,
            time_offset_seconds=minute,
        )
        Synthesis.objects.filter(pk=synthesis.pk).update(
            created_at=start + timedelta(minutes=minute)
        )
    return session


def cycle_block(cycle: int) -> str:
    lines = "\n".join(f"- [exploration, 0.50] thought {n}" for n in (2 * cycle, 2 * cycle + 1))
    return f"Cycle {cycle + 1}, focus: Why?\n{lines}"


def test_a_long_sessions_log_is_its_current_epoch(make_session: Any) -> None:
    session = long_session(make_session)

    log = transcript.session_log(session)

    epoch = 2 * transcript.EPOCH_CYCLES
    assert log == (
        "Synthesis 2 (confidence 0.50):\nunderstanding 2",  # carries the earlier epochs
        cycle_block(epoch),
        cycle_block(epoch + 1),
        cycle_block(epoch + 2),
        "Synthesis 3 (confidence 0.50):\nunderstanding 3",
        cycle_block(epoch + 3),
        cycle_block(epoch + 4),
    )


def test_reading_the_log_builds_only_the_current_epochs_rows(make_session: Any) -> None:
    """Every call of a session reads the log: what it loads must not grow with the session
    (loading every thought each time made each call's work, and the memory the worker's
    database threads keep, grow with the session's length), and it reads rows of the columns
    it writes, not model instances (their JSON fields were most of a call's reading)."""
    session = long_session(make_session)
    built: Counter[str] = Counter()

    def count(sender: type, **_: Any) -> None:
        built[sender.__name__] += 1

    post_init.connect(count)
    try:
        with CaptureQueriesContext(connection) as queries:
            log = transcript.session_log(session)
    finally:
        post_init.disconnect(count)

    assert log[1] == cycle_block(2 * transcript.EPOCH_CYCLES)
    assert built["Thought"] == built["Synthesis"] == built["SubQuestion"] == 0
    [thoughts] = [
        q["sql"] for q in queries.captured_queries if '"thinking_thought"."text"' in q["sql"]
    ]
    assert f'"thinking_thought"."cycle" >= {2 * transcript.EPOCH_CYCLES}' in thoughts
    # The syntheses too: the one carried forward and this epoch's, not all of them.
    syntheses = [
        q["sql"] for q in queries.captured_queries if '"thinking_synthesis"."text"' in q["sql"]
    ]
    assert len(syntheses) == 2
    assert all('"thinking_synthesis"."created_at"' in sql.split("WHERE")[1] for sql in syntheses)


def add_source(session: Any, number: int, minute: int) -> None:
    source = Source.objects.create(
        session=session, number=number, kind="web", title=f"S{number}", key=f"k{number}"
    )
    stamp(Source, source.pk, minute)


def add_question(session: Any, text: str, minute: int) -> None:
    stamp(
        SubQuestion, SubQuestion.objects.create(session=session, text=text, priority=6).pk, minute
    )


def test_events_stored_at_the_same_instant_keep_one_order(make_session: Any) -> None:
    """Rows of one step share their clock reading: sources, then sub-questions, then the
    cycle, then a synthesis, whatever order they are read in."""
    session = make_session(question="Why?")
    add_synthesis(session, 0, 5)
    add_cycle(session, 0, 5)
    add_question(session, "What first?", 5)
    add_question(session, "What next?", 5)
    add_source(session, 1, 5)

    log = transcript.session_log(session)

    assert len(log) == 4 and 'title="S1"' in log[0]
    assert log[2].startswith("Cycle 1, focus: Why?\n") and log[3].startswith("Synthesis 0 ")
    assert log[1] == "Sub-questions added:\n- What first? (priority 6)\n- What next? (priority 6)"


def test_a_row_at_the_same_instant_as_another_event_starts_a_new_block(make_session: Any):
    session = make_session()
    add_source(session, 1, 1)
    add_cycle(session, 0, 2)
    add_source(session, 2, 2)

    log = transcript.session_log(session)

    assert [block.count("<source ") for block in log] == [1, 1, 0]


def test_a_final_answer_and_a_one_thought_cycle_are_logged(make_session: Any) -> None:
    """A completed session given more time (a follow-up) carries its final answer on."""
    session = make_session(question="Why?")
    thought = Thought.objects.create(
        session=session, sequence=0, cycle=0, text="only this", type="insight",
        confidence=0.7, time_offset_seconds=1.0,
    )  # fmt: skip
    stamp(Thought, thought.pk, 1)
    final = Synthesis.objects.create(
        session=session, sequence=1, text="the answer", confidence=0.8, is_final=True,
        time_offset_seconds=2.0,
    )  # fmt: skip
    stamp(Synthesis, final.pk, 2)

    assert transcript.session_log(session) == (
        "Cycle 1, focus: Why?\n- [insight, 0.70] only this",
        "Final answer (confidence 0.80):\nthe answer",
    )


def test_the_first_epoch_logs_every_synthesis(make_session: Any) -> None:
    """Only a later epoch carries just the latest synthesis before it."""
    session = make_session()
    add_synthesis(session, 0, 1)
    add_synthesis(session, 1, 2)
    add_cycle(session, 0, 3)

    log = transcript.session_log(session)

    assert log[:2] == (
        "Synthesis 0 (confidence 0.60):\nunderstanding 0",
        "Synthesis 1 (confidence 0.60):\nunderstanding 1",
    )
