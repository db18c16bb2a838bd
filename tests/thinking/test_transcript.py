"""The session log every model call sends (thinking/transcript.py): a long session's log is
its current epoch (the cycles since the last multiple of EPOCH_CYCLES, with the synthesis
that carries the earlier ones), and reading it costs that epoch, not the whole session."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from django.db.models.signals import post_init
from django.utils import timezone

from thinking.models import Synthesis, Thought
from thinking.transcript import EPOCH_CYCLES, session_log

pytestmark = pytest.mark.django_db

CYCLES = 2 * EPOCH_CYCLES + 5  # two whole epochs behind, five cycles into the third


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

    log = session_log(session)

    epoch = 2 * EPOCH_CYCLES
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
    database threads keep, grow with the session's length)."""
    session = long_session(make_session)
    built: Counter[str] = Counter()

    def count(sender: type, **_: Any) -> None:
        built[sender.__name__] += 1

    post_init.connect(count)
    try:
        session_log(session)
    finally:
        post_init.disconnect(count)

    assert built["Thought"] == 2 * 5, "the five cycles of the current epoch"
    assert built["Synthesis"] == 2, "the carried synthesis and the epoch's own"
