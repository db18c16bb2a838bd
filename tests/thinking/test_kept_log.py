"""The session log a run keeps (thinking/transcript.py, `KeptLog`): every thoughts,
questions and synthesis call reads the log, so a run keeps the rows it read and then reads
only the rows added since. What it gives must be what a whole read gives, to the byte (the
prompt cache reads the log's blocks by their bytes), through long sessions, new epochs,
a person's sub-questions, and edits and deletions made in the admin."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.db.models.functions import Coalesce
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from thinking import transcript
from thinking.models import Source, SubQuestion, Synthesis, ThinkingSession, Thought

pytestmark = pytest.mark.django_db

START = timezone.now() - timedelta(days=1)


class Story:
    """A session written step by step the way the loop writes it: each row stamped with the
    minute it happened (auto_now_add ignores a given time), the minutes only moving on."""

    def __init__(self, session: ThinkingSession) -> None:
        self.session = session
        self.minute = 0
        self.sequence = 0
        self.numbered = 0
        self.syntheses = 0

    def _stamp(self, model: Any, pk: int) -> None:
        self.minute += 1
        model.objects.filter(pk=pk).update(created_at=START + timedelta(minutes=self.minute))

    def thought(
        self, cycle: int, kind: str = "exploration", sub: SubQuestion | None = None
    ) -> Thought:
        thought = Thought.objects.create(
            session=self.session, sequence=self.sequence, cycle=cycle,
            text=f"thought {self.sequence}", type=kind,
            confidence=0.5 + (self.sequence % 5) / 10, time_offset_seconds=1.0, sub_question=sub,
        )  # fmt: skip
        self.sequence += 1
        self._stamp(Thought, thought.pk)
        return thought

    def cycle(self, cycle: int, sub: SubQuestion | None = None) -> None:
        for kind in ("exploration", "critique", "insight"):
            self.thought(cycle, kind, sub)

    def sources(self, count: int) -> None:
        for _ in range(count):
            self.numbered += 1
            source = Source.objects.create(
                session=self.session, number=self.numbered, kind="web", title=f"S{self.numbered}",
                url=f"https://example.com/{self.numbered}", snippet=f"passage {self.numbered}",
                key=f"k{self.numbered}",
            )  # fmt: skip
            self._stamp(Source, source.pk)

    def questions(self, count: int, priority: int = 5) -> list[SubQuestion]:
        added = []
        for n in range(count):
            question = SubQuestion.objects.create(
                session=self.session, text=f"question {self.minute}.{n}", priority=priority
            )
            self._stamp(SubQuestion, question.pk)
            added.append(question)
        return added

    def synthesis(self) -> Synthesis:
        self.syntheses += 1
        synthesis = Synthesis.objects.create(
            session=self.session, sequence=self.syntheses, text=f"understanding {self.syntheses}",
            confidence=0.6, time_offset_seconds=1.0,
        )  # fmt: skip
        self._stamp(Synthesis, synthesis.pk)
        return synthesis


def same_as_a_whole_read(kept: transcript.KeptLog, session: ThinkingSession) -> tuple[str, ...]:
    log = kept.read(session)
    assert log == transcript.session_log(session)
    return log


def test_a_kept_log_is_a_whole_read_through_a_long_session(make_session: Any) -> None:
    """Seventy cycles (two new epochs), research batches, question steps, re-rankings,
    periodic syntheses, a person's hints and sub-questions: after each step the kept log
    equals a whole read, and only grows while an epoch lasts."""
    session = make_session(question="Why is the sky blue?")
    story, kept = Story(session), transcript.KeptLog()
    previous = same_as_a_whole_read(kept, session)
    subs: list[SubQuestion] = []
    cycles = 2 * transcript.EPOCH_CYCLES + 10
    for cycle in range(cycles):
        if cycle % 4 == 0:
            story.sources(3)
        story.cycle(cycle, sub=subs[cycle % len(subs)] if subs and cycle % 3 else None)
        if cycle % 6 == 2:
            subs += story.questions(2)
        if cycle % 9 == 4:  # a re-ranking moves a priority, keeping the one it was added with
            moved = SubQuestion.objects.filter(pk=subs[-1].pk)
            moved.update(priority=9, initial_priority=Coalesce("initial_priority", "priority"))
        if cycle % 11 == 5:
            story.thought(cycle, "hint")  # a person's hint: not in the log
            subs += story.questions(1, priority=10)  # a person's sub-question
        if cycle % 10 == 9:
            story.synthesis()
        log = same_as_a_whole_read(kept, session)
        if transcript.epoch_start_for(cycle) == transcript.epoch_start_for(cycle - 1):
            assert log[: len(previous)] == previous
        previous = log
    assert kept.source_count == story.numbered
    assert f"Cycle {cycles}, focus:" in "".join(previous)
    assert any(block.startswith("Synthesis 6 ") for block in previous), "carried forward"


def test_more_sources_and_questions_than_the_log_shows(make_session: Any) -> None:
    session = make_session()
    story, kept = Story(session), transcript.KeptLog()
    story.sources(transcript.MAX_SOURCES - 2)
    story.cycle(0)
    same_as_a_whole_read(kept, session)
    for cycle in range(1, 4):
        story.sources(3)
        story.questions(25)
        story.cycle(cycle)
        log = same_as_a_whole_read(kept, session)
    assert "".join(log).count("<source ") == transcript.MAX_SOURCES
    assert kept.source_count == transcript.MAX_SOURCES + 7


def statements(read: Callable[[], Any]) -> int:
    with CaptureQueriesContext(connection) as queries:
        read()
    return len(queries.captured_queries)


def test_only_rows_added_since_are_read(make_session: Any) -> None:
    session = make_session()
    story, kept = Story(session), transcript.KeptLog()
    story.sources(4)
    story.cycle(0)
    story.questions(2)
    story.synthesis()
    whole = statements(lambda: transcript.session_log(session))

    # The first read is whole, its last cycle from the statement that says what changed.
    assert statements(lambda: kept.read(session)) == whole
    assert statements(lambda: kept.read(session)) == 1, "nothing new: one statement"
    story.cycle(1)
    assert statements(lambda: kept.read(session)) == 2, "the new cycle's thoughts"
    story.sources(2)
    story.cycle(2)
    assert statements(lambda: kept.read(session)) == 3
    same_as_a_whole_read(kept, session)


def test_a_read_found_wanting_reads_no_more_kinds_before_the_whole_read(
    make_session: Any,
) -> None:
    """The thoughts' count says one was deleted: the log is read whole, without first
    reading the new sources and sub-questions that read replaces."""
    session = make_session()
    story, kept = Story(session), transcript.KeptLog()
    story.cycle(0)
    story.sources(1)
    story.questions(1)
    kept.read(session)
    whole = statements(lambda: transcript.session_log(session))
    Thought.objects.filter(session=session, sequence=0).delete()
    story.cycle(1)
    story.sources(1)
    story.questions(1)

    # The statement, the new thoughts' read that finds the count wrong, then the whole read.
    assert statements(lambda: kept.read(session)) == 1 + whole
    same_as_a_whole_read(kept, session)


def test_an_edit_in_the_admin_is_shown(make_session: Any, admin_client: Any) -> None:
    """The admin saves a changed row: the next read is whole, with the new text."""
    session = make_session(question="Why?")
    story, kept = Story(session), transcript.KeptLog()
    story.cycle(0)
    [question] = story.questions(1)
    story.cycle(1, sub=question)
    story.sources(1)
    kept.read(session)

    thought = Thought.objects.get(session=session, sequence=1)
    thought.text = "an edited thought"
    thought.confidence = 0.1  # not saved: only the text is asked for
    thought.save(update_fields=["text"])
    assert Thought.objects.get(pk=thought.pk).confidence != 0.1
    question.text = "an edited question"
    question.save()
    source = Source.objects.get(session=session)
    source.snippet = "an edited passage"
    source.save()

    log = "".join(same_as_a_whole_read(kept, session))
    assert "an edited thought" in log and "thought 1" not in log
    assert "Cycle 2, focus: an edited question" in log
    assert "an edited passage" in log
    session.refresh_from_db()
    assert session.log_edits == 3

    # Through the admin's own form.
    synthesis = story.synthesis()
    kept.read(session)
    url = f"/admin/thinking/synthesis/{synthesis.pk}/change/"
    page = admin_client.get(url)
    assert page.status_code == 200
    form = page.context["adminform"].form
    data = {name: form[name].value() for name in form.fields if form[name].value() is not None}
    for inline in page.context["inline_admin_formsets"]:  # no inline rows: just their count
        management = inline.formset.management_form
        data.update(
            {management.add_prefix(name): management[name].value() for name in management.fields}
        )
    data.update(text="an edited understanding", key_insights="[]", remaining_questions="[]")
    assert admin_client.post(url, data).status_code == 302
    assert "an edited understanding" in "".join(same_as_a_whole_read(kept, session))


def test_rows_deleted_are_read_whole(make_session: Any) -> None:
    session = make_session()
    story, kept = Story(session), transcript.KeptLog()
    story.sources(3)
    story.cycle(0)
    [first, _] = story.questions(2)
    story.cycle(1)
    kept.read(session)

    Source.objects.filter(session=session, number=2).delete()
    assert 'title="S2"' not in "".join(same_as_a_whole_read(kept, session))
    # One deleted and one added: the same count, a newer key.
    first.delete()
    story.questions(1)
    assert "question" in "".join(same_as_a_whole_read(kept, session))
    Thought.objects.filter(session=session, sequence=0).delete()
    story.cycle(2)
    assert "thought 0\n" not in "\n".join(same_as_a_whole_read(kept, session)) + "\n"


def test_a_row_stored_under_an_older_key_is_read(make_session: Any) -> None:
    """A row committed after a newer one (two writers at once) has the older key: the count
    says one more row than the keys after the newest, so the log is read whole."""
    session = make_session()
    story, kept = Story(session), transcript.KeptLog()
    story.cycle(0)
    [held] = story.questions(1)
    story.questions(1)
    kept.read(session)
    SubQuestion.objects.filter(pk=held.pk).delete()
    kept.read(session)  # the deletion is read: the held key is free and older than the newest

    late = SubQuestion.objects.create(pk=held.pk, session=session, text="late", priority=4)
    SubQuestion.objects.filter(pk=late.pk).update(created_at=START + timedelta(minutes=99))
    log = same_as_a_whole_read(kept, session)
    assert log[-1].endswith("\n- late (priority 4)"), "the latest, so the last"


@contextmanager
def after_statement(marker: str, then: Callable[[], None]) -> Iterator[None]:
    """Run `then` once, right after the first statement whose SQL holds `marker`: another
    writer committing between two statements of a read."""
    done = []

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        result = execute(sql, params, many, context)
        if marker in sql and not done:
            done.append(True)
            then()
        return result

    with connection.execute_wrapper(wrapper):
        yield
    assert done, f"no statement with {marker!r} ran"


def test_a_row_added_during_a_whole_read_is_shown_once(make_session: Any) -> None:
    """A source stored between the read's first statement and the whole read is in the
    rows kept but not in the counts: the next read finds it again, and shows it once."""
    session = make_session()
    story, kept = Story(session), transcript.KeptLog()
    story.sources(2)
    story.cycle(0)
    with after_statement('AS "n_sources"', lambda: story.sources(1)):
        kept.read(session)
    story.cycle(1)

    log = same_as_a_whole_read(kept, session)
    assert "".join(log).count('title="S3"') == 1


def test_a_new_epoch_begun_during_a_whole_read_is_read_whole_next(make_session: Any) -> None:
    """The first cycle of a new epoch stored between the statement and the whole read: that
    read took its epoch from the statement, and the next one sees the epoch moved."""
    session = make_session()
    story, kept = Story(session), transcript.KeptLog()
    for cycle in range(transcript.EPOCH_CYCLES):
        story.cycle(cycle)
    with after_statement('AS "n_sources"', lambda: story.cycle(transcript.EPOCH_CYCLES)):
        kept.read(session)

    log = same_as_a_whole_read(kept, session)
    assert log[0].startswith(f"Cycle {transcript.EPOCH_CYCLES + 1}, ")


def test_a_new_epoch_is_read_whole(make_session: Any) -> None:
    session = make_session()
    story, kept = Story(session), transcript.KeptLog()
    for cycle in range(transcript.EPOCH_CYCLES):
        story.cycle(cycle)
        if cycle % 10 == 9:
            story.synthesis()
    kept.read(session)
    story.cycle(transcript.EPOCH_CYCLES)

    log = same_as_a_whole_read(kept, session)
    assert log[0].startswith("Synthesis 3 "), "the synthesis before the epoch carries it"
    assert log[1].startswith(f"Cycle {transcript.EPOCH_CYCLES + 1}, ")


def test_a_log_not_read_yet_has_no_source_count_nor_hints() -> None:
    with pytest.raises(RuntimeError, match="not been read"):
        _ = transcript.KeptLog().source_count
    with pytest.raises(RuntimeError, match="not been read"):
        transcript.KeptLog().hints(None)


def test_hints_are_read_again_only_once_a_person_added_edited_or_deleted_one(
    make_session: Any,
) -> None:
    """Issue 17: every thought cycle's prompt shows a person's newest hints. The log's one
    statement counts them, so a run reads them only when they changed: added, edited in
    the admin, deleted."""
    session = make_session()
    story, kept = Story(session), transcript.KeptLog()
    story.cycle(0)
    first = story.thought(0, "hint")

    def hints_now() -> tuple[list[str], int]:
        kept.read(session)
        with CaptureQueriesContext(connection) as queries:
            hints = kept.hints(session.pk)
        return hints, len(queries)

    assert hints_now() == ([first.text], 1)
    story.cycle(1)
    assert hints_now() == ([first.text], 0)  # thoughts added, no hint: none read
    later = story.thought(1, "hint")
    assert hints_now() == ([later.text, first.text], 1)
    first.text = "Look at the oceans first."
    first.save()  # as the admin saves it
    assert hints_now() == ([later.text, "Look at the oceans first."], 1)
    later.delete()
    assert hints_now() == (["Look at the oceans first."], 1)
    assert hints_now() == (["Look at the oceans first."], 0)


def test_a_deleted_sessions_log_is_empty(make_session: Any) -> None:
    session = make_session()
    story, kept = Story(session), transcript.KeptLog()
    story.sources(2)
    story.cycle(0)
    assert kept.read(session)
    ThinkingSession.objects.filter(pk=session.pk).delete()

    assert kept.read(session) == ()
    assert kept.source_count == 0


def a_second_epoch(make_session: Any) -> tuple[Story, transcript.KeptLog]:
    """A session three cycles into its second epoch, a synthesis every ten cycles, read once."""
    session = make_session()
    story, kept = Story(session), transcript.KeptLog()
    for cycle in range(transcript.EPOCH_CYCLES + 3):
        story.cycle(cycle)
        if cycle % 10 == 9:
            story.synthesis()
    kept.read(session)
    return story, kept


def test_only_the_kept_epochs_thoughts_are_counted(make_session: Any) -> None:
    """The statement that says what changed counts the thoughts of the kept epoch, not the
    session's: a long session's read does not grow with it. A thought of an earlier epoch
    deleted changes nothing the log shows; once a new epoch is read whole, the next read
    counts that epoch's thoughts and takes one statement."""
    story, kept = a_second_epoch(make_session)
    session = story.session
    Thought.objects.filter(session=session, cycle=2).delete()
    assert statements(lambda: kept.read(session)) == 1, "nothing the log shows changed"
    same_as_a_whole_read(kept, session)

    for cycle in range(transcript.EPOCH_CYCLES + 3, 2 * transcript.EPOCH_CYCLES + 1):
        story.cycle(cycle)
    log = same_as_a_whole_read(kept, session)  # a new epoch: read whole
    assert log[1].startswith(f"Cycle {2 * transcript.EPOCH_CYCLES + 1}, ")
    assert statements(lambda: kept.read(session)) == 1, "nothing new"
    story.cycle(2 * transcript.EPOCH_CYCLES + 1)
    assert statements(lambda: kept.read(session)) == 2, "the new cycle's thoughts"
    same_as_a_whole_read(kept, session)


def test_a_thought_stored_during_a_whole_read_is_counted_from_its_rows(
    make_session: Any,
) -> None:
    """A whole read takes the thoughts' count and newest key from the rows it read: one
    stored between the statement and the rows is in both, so the next read finds nothing
    new and takes one statement."""
    story, kept = a_second_epoch(make_session)
    session = story.session
    with after_statement('AS "n_sources"', lambda: story.cycle(transcript.EPOCH_CYCLES + 3)):
        edited = Thought.objects.get(session=session, sequence=3 * transcript.EPOCH_CYCLES)
        edited.text = "edited in the admin"
        edited.save()
        kept.read(session)  # an edit: read whole, the new cycle's thoughts among its rows
    assert statements(lambda: kept.read(session)) == 1, "nothing new"
    log = same_as_a_whole_read(kept, session)
    assert log[-1].startswith(f"Cycle {transcript.EPOCH_CYCLES + 4}, ")


def test_a_later_epoch_is_read_by_its_new_rows_too(make_session: Any) -> None:
    story, kept = a_second_epoch(make_session)
    session = story.session
    story.cycle(transcript.EPOCH_CYCLES + 3)
    assert statements(lambda: kept.read(session)) == 2, "the new cycle's thoughts"
    story.synthesis()
    assert statements(lambda: kept.read(session)) == 2, "the new synthesis"
    log = same_as_a_whole_read(kept, session)
    assert log[0].startswith("Synthesis 3 ") and log[-1].startswith("Synthesis 4 ")


def test_rows_stored_by_a_clock_behind_are_placed_as_a_whole_read_places_them(
    make_session: Any,
) -> None:
    """A person's sub-question (stored by the web process) or a row of another worker may
    carry an earlier time than rows stored before it: a whole read orders by time, and a
    time before the epoch's start moves what the epoch carries."""
    story, kept = a_second_epoch(make_session)
    session = story.session
    [late] = story.questions(1)
    early = SubQuestion.objects.create(session=session, text="asked a little earlier", priority=10)
    SubQuestion.objects.filter(pk=early.pk).update(
        created_at=START + timedelta(minutes=story.minute - 1)
    )
    log = same_as_a_whole_read(kept, session)
    assert log[-1] == (
        f"Sub-questions added:\n- asked a little earlier (priority 10)\n- {late.text} (priority 5)"
    )

    # A synthesis timed before the epoch's first cycle is the one it carries.
    synthesis = story.synthesis()
    first = Thought.objects.get(session=session, sequence=3 * transcript.EPOCH_CYCLES)
    Synthesis.objects.filter(pk=synthesis.pk).update(
        created_at=first.created_at - timedelta(seconds=1)
    )
    log = same_as_a_whole_read(kept, session)
    assert log[0].startswith("Synthesis 4 ")

    # A new cycle's thoughts timed before the epoch's first cycle start the epoch earlier:
    # syntheses 3 and 4 are then inside it, and the one before them (2) is carried.
    second = Synthesis.objects.get(session=session, sequence=2)
    story.cycle(transcript.EPOCH_CYCLES + 3)
    Thought.objects.filter(session=session, cycle=transcript.EPOCH_CYCLES + 3).update(
        created_at=second.created_at + timedelta(seconds=1)
    )
    log = same_as_a_whole_read(kept, session)
    assert log[0].startswith("Synthesis 2 ")
    assert log[2].startswith("Synthesis 3 ") and log[3].startswith("Synthesis 4 ")


def test_in_the_first_epoch_rows_timed_by_a_clock_behind_are_merged(make_session: Any) -> None:
    """The first epoch's log carries every row, whatever its time: a thought or a synthesis
    timed before the first cycle (another worker's clock) changes no epoch's start, so it
    is read by its key like any new row, not by a whole read."""
    session = make_session()
    story, kept = Story(session), transcript.KeptLog()
    same_as_a_whole_read(kept, session)  # no thoughts yet
    synthesis = story.synthesis()
    Synthesis.objects.filter(pk=synthesis.pk).update(created_at=START)
    assert statements(lambda: kept.read(session)) == 2, "the new synthesis"
    story.cycle(0)
    same_as_a_whole_read(kept, session)
    late = story.thought(1)
    Thought.objects.filter(pk=late.pk).update(created_at=START)
    assert statements(lambda: kept.read(session)) == 2, "the new thought"
    same_as_a_whole_read(kept, session)


def test_rows_stored_again_under_a_freed_place_are_read_in_order(make_session: Any) -> None:
    """Rows deleted and then stored again with their old sequence or number (in the admin)
    come after the newest key but belong in the middle."""
    session = make_session()
    story, kept = Story(session), transcript.KeptLog()
    story.sources(4)
    for cycle in range(3):
        story.cycle(cycle)
    story.synthesis()
    story.synthesis()
    story.cycle(3)
    kept.read(session)
    Source.objects.filter(session=session, number=2).delete()
    Thought.objects.filter(session=session, sequence=4).delete()
    Synthesis.objects.filter(session=session, sequence=1).delete()
    kept.read(session)  # deletions: read whole

    Source.objects.create(session=session, number=2, kind="web", title="S2 again", key="k2b")
    Thought.objects.create(
        session=session, sequence=4, cycle=1, text="thought 4 again", type="critique",
        confidence=0.5, time_offset_seconds=1.0,
    )  # fmt: skip
    Synthesis.objects.create(
        session=session, sequence=1, text="understanding 1 again", confidence=0.6,
        time_offset_seconds=1.0,
    )  # fmt: skip
    log = same_as_a_whole_read(kept, session)
    assert any("thought 3\n- [critique, 0.50] thought 4 again\n- [insight" in b for b in log)


def test_sub_questions_with_the_same_text_are_both_shown(make_session: Any) -> None:
    session = make_session()
    story, kept = Story(session), transcript.KeptLog()
    story.cycle(0)
    SubQuestion.objects.create(session=session, text="Why?", priority=5)
    SubQuestion.objects.create(session=session, text="Why?", priority=5)
    kept.read(session)
    story.cycle(1)
    SubQuestion.objects.create(session=session, text="Why?", priority=5)
    log = "".join(same_as_a_whole_read(kept, session))
    assert log.count("- Why? (priority 5)") == 3


def test_a_kept_read_draws_again_only_the_blocks_whose_rows_changed(
    make_session: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Drawing every block on every call (the evidence block above all) was most of a kept
    read's CPU: a block is drawn once, and again only when a row in it changed."""
    drawn: list[str] = []

    def counted(name: str) -> Callable[..., str]:
        draw = getattr(transcript, name)

        def spy(*rows: Any) -> str:
            drawn.append(name)
            return draw(*rows)

        return spy

    for name in ("evidence_pack", "_cycle_block", "_questions_block"):
        monkeypatch.setattr(transcript, name, counted(name))
    session = make_session()
    story, kept = Story(session), transcript.KeptLog()
    story.sources(2)
    story.cycle(0)
    story.questions(2)
    story.cycle(1)
    kept.read(session)
    assert sorted(drawn) == ["_cycle_block", "_cycle_block", "_questions_block", "evidence_pack"]

    drawn.clear()
    kept.read(session)
    assert drawn == [], "nothing new: nothing drawn"
    story.cycle(2)
    kept.read(session)
    assert drawn == ["_cycle_block"]
    drawn.clear()
    thought = Thought.objects.get(session=session, sequence=4)  # cycle 1's second
    thought.text = "an edited thought"
    thought.save()  # read whole, and only its cycle drawn again

    log = kept.read(session)
    assert drawn == ["_cycle_block"]
    assert "] an edited thought\n" in "\n".join(log) + "\n"
    assert log == transcript.session_log(session)
