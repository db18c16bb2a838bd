"""What each of the worker's stores keeps, called as the loop calls them (issue 16: mutants of
thinking/deliberation/steps.py that no session test noticed)."""

from __future__ import annotations

import importlib
from datetime import datetime
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.apps import apps as django_apps
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from accounts.models import Team
from research.models import KnowledgeItem
from thinking.deliberation import citations, planner, steps
from thinking.events import SessionEvent
from thinking.models import (
    Delivery,
    LeaseLost,
    ModelCall,
    Source,
    Status,
    SubQuestion,
    Synthesis,
    ThinkingSession,
)
from thinking.provider import parsing
from thinking.provider.llm import Reply, Usage
from thinking.web import export

pytestmark = pytest.mark.django_db

WORKER = "w1"


class FixedLap:
    """A meter that hands out 2.5 s of active time per stored step."""

    def lap(self) -> float:
        return 2.5


def held(make_session: Any, **fields: Any) -> ThinkingSession:
    """A session this test's worker is running."""
    fields.setdefault("status", Status.THINKING)
    return make_session(worker_id=WORKER, **fields)


def cancel(session: ThinkingSession) -> None:
    """A person cancels while the worker is still busy with the session."""
    session.cancel()
    session.refresh_from_db()
    assert session.status == Status.CANCELLED


# --- a cancel that lands while the worker is failing, waiting or shutting down -----------


def test_a_failure_after_a_person_cancelled_keeps_the_cancel_and_raises_nothing(
    make_session: Any,
):
    session = held(make_session)
    cancel(session)
    stored = fail(session)
    assert stored is not None and stored.status == Status.CANCELLED
    session.refresh_from_db()
    assert (session.status, session.error_message) == (Status.CANCELLED, "")


def test_a_worker_shutting_down_lets_go_of_a_cancelled_session_too(make_session: Any):
    session = held(make_session)
    cancel(session)
    async_to_sync(steps.release_lease)(session.pk, worker_id=WORKER)
    session.refresh_from_db()
    assert session.worker_id == "" and session.heartbeat_at is None


def test_waiting_for_the_provider_reports_a_cancel_instead_of_raising(make_session: Any):
    session = held(make_session)
    cancel(session)
    status = async_to_sync(steps.set_waiting)(session.pk, WORKER, "Overloaded (529).")
    assert status == Status.CANCELLED


def test_the_waiting_notice_keeps_when_the_wait_began_and_clips_a_long_reason(
    make_session: Any,
):
    session = held(make_session)
    async_to_sync(steps.set_waiting)(session.pk, WORKER, "Overloaded (529).")
    session.refresh_from_db()
    began = session.waiting_since
    assert began is not None

    # Still waiting a retry later, for a longer reason: the notice says since when.
    async_to_sync(steps.set_waiting)(session.pk, WORKER, "x" * 1000)
    session.refresh_from_db()
    assert session.waiting_since == began
    assert session.waiting_reason == "x" * 300

    async_to_sync(steps.set_waiting)(session.pk, WORKER, "")
    session.refresh_from_db()
    assert (session.waiting_since, session.waiting_reason) == (None, "")


# --- sub-questions ----------------------------------------------------------------------


def ask(session: ThinkingSession, focus: steps.Focus, *questions: parsing.ParsedQuestion) -> Any:
    reply = Reply(text="…", model="claude-test", stop_reason="end_turn")
    return async_to_sync(steps.store_questions)(
        session.pk, focus, list(questions), reply, worker_id=WORKER, meter=FixedLap()
    )


def test_questions_asked_while_exploring_a_sub_question_hang_under_it(make_session: Any):
    session = held(make_session)
    parent = SubQuestion.objects.create(session=session, text="What do we measure?", priority=8)
    focus = steps.Focus(text=parent.text, sub_question_id=parent.pk, priority=8)
    ask(
        session,
        focus,
        parsing.ParsedQuestion("How is it measured?", priority=7, why="Methods differ."),
        parsing.ParsedQuestion("how is it  measured", priority=5, why="The same, reworded."),
    )
    [child] = SubQuestion.objects.filter(session=session).exclude(pk=parent.pk)
    assert (child.text, child.priority, child.why) == ("How is it measured?", 7, "Methods differ.")
    assert child.parent_id == parent.pk


def test_a_question_round_is_accounted_as_one_and_its_time_counted(make_session: Any):
    session = held(make_session, active_seconds=10.0)
    stored, event = ask(session, steps.Focus(text=session.question), parsing.ParsedQuestion("Why?"))
    # The page redraws the question list of this session.
    assert (event.session_id, event.questions) == (session.pk, True)
    assert stored.active_seconds == pytest.approx(12.5)
    assert list(ModelCall.objects.filter(session=session).values_list("purpose", flat=True)) == [
        "questions"
    ]


def asked_then(
    session: ThinkingSession, hook: Any, usage: Usage | None = None
) -> tuple[ThinkingSession, SessionEvent]:
    """One question stored, the session's question its focus, with `hook` as `Step.then`'s."""
    reply = Reply(text="…", model="claude-test", stop_reason="end_turn", usage=usage or Usage())
    return steps._store_questions(
        session.pk,
        steps.Focus(text=session.question),
        [parsing.ParsedQuestion("Why?")],
        reply,
        worker_id=WORKER,
        meter=FixedLap(),
        then=hook,
    )


def test_a_question_a_person_asked_or_an_edited_one_is_not_asked_again(make_session: Any):
    """Duplicates are found by each row's kept key: one a person asked from the page, one
    whose text was changed in the admin (its old wording is new again), and ones stored
    before the key existed (the migration gives them theirs)."""
    session = held(make_session)
    older = SubQuestion.objects.create(session=session, text="Before the key?", priority=5)
    SubQuestion.objects.filter(pk=older.pk).update(text_key="")
    migration = importlib.import_module("thinking.migrations.0015_sub_question_text_key")
    migration._digests(django_apps, None)
    session.steer(user=None, kind="question", text="Does sleep help memory?")
    edited = SubQuestion.objects.create(session=session, text="Old wording?", priority=5)
    edited.text = "Is dreaming needed?"
    edited.save(update_fields=(name for name in ["text"]))  # any iterable, as Django takes
    # A change of another field keeps the key of the text stored, not of one in memory.
    edited.text, edited.priority = "Never saved?", 6
    edited.save(update_fields=["priority"])
    ask(
        session,
        steps.Focus(text=session.question),
        parsing.ParsedQuestion("does SLEEP help memory", priority=6),
        parsing.ParsedQuestion("Is dreaming needed", priority=6),
        parsing.ParsedQuestion("before the key", priority=6),
        parsing.ParsedQuestion("Old wording?", priority=6),
        parsing.ParsedQuestion("?!", priority=6),  # no words: never a question
    )
    texts = sorted(SubQuestion.objects.filter(session=session).values_list("text", flat=True))
    kept = ["Before the key?", "Does sleep help memory?", "Is dreaming needed?"]
    assert texts == [*kept, "Old wording?"]
    assert str(SubQuestion(text="x" * 80, priority=3)) == "[3] " + "x" * 70  # as the admin lists it


def test_storing_questions_does_not_read_every_stored_one(make_session: Any, monkeypatch: Any):
    """A long session's sub-questions are not each normalized again on every round: only the
    round's own questions and the session's question are (the cost grew with the session)."""
    session = held(make_session)
    SubQuestion.objects.bulk_create(
        SubQuestion(session=session, text=f"Stored {n}?", priority=5, text_key=key)
        for n in range(40)
        for key in [parsing.question_digest(f"Stored {n}?")]
    )
    normalized: list[str] = []
    real = parsing.question_key

    def counted(text: str) -> str:
        normalized.append(text)
        return real(text)

    monkeypatch.setattr(parsing, "question_key", counted)
    asked = [parsing.ParsedQuestion(f"stored {n}", priority=6) for n in (3, 40, 41)]
    ask(session, steps.Focus(text=session.question), *asked)
    assert len(normalized) == 4  # three asked, and the session's question
    new = SubQuestion.objects.filter(session=session).exclude(text__endswith="?")
    assert sorted(new.values_list("text", flat=True)) == ["stored 40", "stored 41"]


# --- the research plan --------------------------------------------------------------------


def save(session: ThinkingSession, plan: planner.Plan) -> ThinkingSession:
    return async_to_sync(steps.save_plan)(session.pk, plan, [], worker_id=WORKER, meter=FixedLap())


def test_planning_counts_its_time_and_a_plan_without_a_note_adds_none(make_session: Any):
    session = held(make_session, active_seconds=1.0, research_notes=["Web search is off."])
    stored = save(session, planner.Plan(steps=["Look it up"]))
    assert stored.active_seconds == pytest.approx(3.5)
    assert stored.research_notes == ["Web search is off."]


def test_the_page_keeps_the_twenty_newest_research_notes(make_session: Any):
    notes = [f"Note {n}" for n in range(20)]
    session = held(make_session, research_notes=notes)
    stored = save(session, planner.Plan(steps=["Simple"], note="The planning call failed."))
    assert stored.research_notes == [*notes[1:], "The planning call failed."]


# --- syntheses ----------------------------------------------------------------------------


def synthesise(session: ThinkingSession, reply: Reply, *, worker_id: str = WORKER) -> Any:
    parsed = parsing.ParsedSynthesis(
        "Mostly scattering [1].",
        key_insights=["Short wavelengths scatter more."],
        confidence=0.7,
        remaining_questions=["Why not violet?"],
    )
    return async_to_sync(steps.store_synthesis)(
        session.pk, parsed, reply, worker_id=worker_id, meter=FixedLap(), final=False, reason=""
    )


def test_a_synthesis_keeps_its_insights_its_reasoning_and_when_it_was_written(
    make_session: Any,
):
    session = held(make_session, active_seconds=61.23456)
    reply = Reply(text="…", model="claude-test", thinking="Weigh the sources first.")
    synthesise(session, reply)
    [synthesis] = session.syntheses.all()
    assert synthesis.key_insights == ["Short wavelengths scatter more."]
    assert synthesis.remaining_questions == ["Why not violet?"]
    assert synthesis.reasoning == "Weigh the sources first."
    assert synthesis.time_offset_seconds == 61.23  # as the timeline shows it


def test_a_synthesis_cut_off_at_the_length_limit_is_marked_on_the_page(
    client: Any, alice: Any, make_session: Any
):
    session = held(make_session)
    synthesise(session, Reply(text="Mostly scat", model="claude-test", truncated=True))
    client.force_login(alice)
    html = client.get(session.get_absolute_url()).content.decode()
    [row] = [part for part in html.split('<li id="synthesis-')[1:]]
    assert "cut off" in row.split("</li>")[0]


def test_a_whole_synthesis_carries_no_cut_off_mark(client: Any, alice: Any, make_session: Any):
    session = held(make_session)
    synthesise(session, Reply(text="Mostly scattering [1].", model="claude-test"))
    client.force_login(alice)
    html = client.get(session.get_absolute_url()).content.decode()
    assert 'id="synthesis-0"' in html and "cut off" not in html


def test_a_worker_that_lost_the_session_stores_no_synthesis(make_session: Any):
    session = held(make_session)
    with pytest.raises(LeaseLost):
        synthesise(session, Reply(text="…", model="claude-test"), worker_id="w-gone")
    assert not session.syntheses.exists()


def test_a_synthesis_is_numbered_after_the_newest_and_its_check_reads_what_it_cites(
    make_session: Any,
):
    """A synthesis takes the number after the newest (a deleted one leaves its gap); its
    check reads the text as stored, the session's model and the passages of the sources
    it cites, and no other session's."""
    session = held(make_session, model_id="claude-opus-4-5")
    for sequence in (0, 2):  # a person deleted synthesis 1 in the admin
        Synthesis.objects.create(
            session=session, sequence=sequence, text="…", confidence=0.5, time_offset_seconds=0
        )
    other = make_session(question="Another question?")
    Synthesis.objects.create(
        session=other, sequence=7, text="…", confidence=0.5, time_offset_seconds=0
    )
    for number, title in ((1, "Optics"), (2, "Rayleigh"), (4, "Uncited")):
        Source.objects.create(
            session=session,
            number=number,
            kind="web",
            title=title,
            snippet=f"{title} page.",
            key=title,
        )
    Source.objects.create(
        session=other, number=3, kind="web", title="Elsewhere", snippet="Other.", key="e"
    )
    text = "Light scatters [1]. Blue scatters most [2]. Violet too [3]."
    parsed = parsing.ParsedSynthesis(text, confidence=0.6)
    reply = Reply(text=text, model="claude-test")

    stored, event = async_to_sync(steps.store_synthesis)(
        session.pk, parsed, reply, worker_id=WORKER, meter=FixedLap(), final=False, reason=""
    )

    [synthesis] = session.syntheses.filter(sequence=3)
    assert (event.synthesis, synthesis.text) == (3, text)
    assert stored.unknown_citations == 1  # [3] is another session's source
    assert citations.load(pk=synthesis.pk) == citations.Loaded(
        synthesis.pk,
        3,
        session.pk,
        "claude-opus-4-5",
        [citations.Claim("Light scatters.", 1, 0), citations.Claim("Blue scatters most.", 2, 0)],
        {1: ("Optics", "Optics page."), 2: ("Rayleigh", "Rayleigh page.")},  # not [4]
    )


def test_a_synthesis_reads_only_the_numbers_of_the_sources_it_cites(make_session: Any):
    session = held(make_session)
    Source.objects.create(
        session=session, number=1, kind="web", title="Optics", snippet="A page.", key="o"
    )
    with CaptureQueriesContext(connection) as queries:
        stored, event = synthesise(session, Reply(text="…", model="claude-test"))
    assert event.synthesis == 0  # the session's first
    assert stored.unknown_citations == 0  # it cites [1], which exists
    [read] = [q["sql"] for q in queries.captured_queries if '"thinking_source"' in q["sql"]]
    assert '"thinking_source"."number"' in read and "snippet" not in read


def final_answer(session: ThinkingSession, text: str) -> Any:
    parsed = parsing.ParsedSynthesis(text, confidence=0.8)
    reply = Reply(text=text, model="claude-test")
    return async_to_sync(steps.store_synthesis)(
        session.pk, parsed, reply, worker_id=WORKER, meter=FixedLap(), final=True, reason="budget"
    )


def test_a_shared_sessions_answer_joins_its_teams_knowledge_once(make_session: Any):
    team = Team.objects.create(name="Optics")
    question = "Why is the sky blue? " + "Explain it carefully. " * 20
    session = held(make_session, team=team, question=question)
    before = timezone.now()
    stored, event = final_answer(session, "Rayleigh scattering [1].")
    assert event.finished and stored.status == Status.COMPLETED
    assert stored.finished_at is not None and stored.finished_at >= before

    [item] = KnowledgeItem.objects.all()
    assert item.team_id == team.pk  # teammates' later sessions find it
    assert item.title == f"Deep Think: {question}"[:200]
    assert item.body == "Rayleigh scattering [1]."
    assert item.get_source_display() == "Session"  # the knowledge list's label for it

    # Given more time (a follow-up), the session's newer answer replaces it: no second item.
    ThinkingSession.objects.filter(pk=session.pk).update(status=Status.THINKING, worker_id=WORKER)
    final_answer(session, "Rayleigh scattering, and our eyes [1].")
    [item] = KnowledgeItem.objects.all()
    assert item.body == "Rayleigh scattering, and our eyes [1]."


def fail(session: ThinkingSession) -> Any:
    return async_to_sync(steps.fail)(
        session.pk, worker_id=WORKER, meter=FixedLap(), message="The provider refused."
    )


@pytest.mark.parametrize(
    "end", [fail, lambda session: final_answer(session, "Rayleigh.")], ids=["failed", "completed"]
)
def test_a_session_that_ends_sends_its_owner_the_mail_they_asked_for(
    make_session: Any, alice: Any, django_capture_on_commit_callbacks: Any, end: Any
):
    alice.email = "alice@example.org"
    alice.save()
    session = held(make_session, notify_email=True)
    with django_capture_on_commit_callbacks(execute=True):
        end(session)
    [mail] = Delivery.objects.filter(session=session)
    assert (mail.kind, mail.target) == ("mail", "alice@example.org")


# --- a thought cycle ----------------------------------------------------------------------


def test_a_cycle_on_a_sub_question_files_its_notes_and_thoughts_under_it(make_session: Any):
    session = held(make_session, cycles=3, active_seconds=61.23456)
    parent = SubQuestion.objects.create(session=session, text="What do we measure?", priority=8)
    focus = steps.Focus(text=parent.text, sub_question_id=parent.pk, priority=8)
    reading = parsing.ThoughtReply(
        thoughts=[
            parsing.ParsedThought("Measure the spectrum.", "analysis", 0.6),
            parsing.ParsedThought("Then compare it.", "exploration", 0.4),
        ],
        route="lines",
    )
    # A think-tool round: two calls, each with its own reasoning, then the thoughts.
    replies = [
        Reply(text="", model="claude-test", thinking="First look at the question."),
        Reply(text="…", model="claude-test", thinking="Now weigh the sources."),
    ]
    before = timezone.now()
    with CaptureQueriesContext(connection) as queries:
        steps._store_thoughts(
            session.pk, focus, reading, replies, ["Checked the units.", ""],
            worker_id=WORKER, meter=FixedLap(),
        )  # fmt: skip

    # The note and the thoughts in one statement (issue 17).
    inserts = [q for q in queries if q["sql"].startswith('INSERT INTO "thinking_thought"')]
    assert len(inserts) == 1, inserts
    rows = [export.thought_row(t) for t in session.thoughts.order_by("sequence")]
    assert [(r["type"], r["text"]) for r in rows] == [
        ("scratchpad", "Checked the units."),
        ("analysis", "Measure the spectrum."),
        ("exploration", "Then compare it."),
    ]
    # The download and the page's sub-question filter find all three under the sub-question,
    # in the cycle they were written in.
    assert {(r["cycle"], r["sub_question"]) for r in rows} == {(3, "What do we measure?")}
    # When they were written, as the timeline shows it.
    assert {r["time_offset_seconds"] for r in rows} == {61.23}
    # Both calls' reasoning, in order, shown once with the cycle's first thought.
    assert rows[1]["reasoning"] == "First look at the question.\n\nNow weigh the sources."
    assert rows[2]["reasoning"] is None
    # A scratch note is a working note, not a claim: the download gives it no confidence.
    assert rows[0]["confidence"] == 0.0
    parent.refresh_from_db()
    assert parent.explored and parent.answer == "Measure the spectrum."
    # The download and the API say when the sub-question was explored.
    explored_at = export.sub_question_row(parent)["explored_at"]
    assert explored_at is not None
    assert before <= datetime.fromisoformat(explored_at) <= timezone.now()


def test_a_cycle_on_a_sub_question_that_yields_no_thought_still_marks_it_explored(
    make_session: Any,
):
    session = held(make_session)
    question = SubQuestion.objects.create(session=session, text="Is it stable?", priority=6)
    focus = steps.Focus(text=question.text, sub_question_id=question.pk, priority=6)
    # Only a scratch note came back: nothing to answer the sub-question with.
    _, event = async_to_sync(steps.store_thoughts)(
        session.pk, focus, parsing.ThoughtReply(thoughts=[]),
        [Reply(text="", model="claude-test")], ["Looked, found nothing."],
        worker_id=WORKER, meter=FixedLap(),
    )  # fmt: skip
    question.refresh_from_db()
    # Explored (the loop moves on to the next), with no answer rather than a crash.
    assert question.explored and export.sub_question_row(question)["answer"] is None
    assert event.questions and len(event.thoughts) == 1
    assert session.thoughts.get().text == "Looked, found nothing."


def test_the_session_counts_its_cycles_and_how_each_reply_was_read(make_session: Any):
    session = held(make_session, parse_routes={"tags": 1})
    for n in range(2):
        stored, event = async_to_sync(steps.store_thoughts)(
            session.pk, steps.Focus(text=session.question),
            parsing.ThoughtReply(
                thoughts=[parsing.ParsedThought("A thought.", "analysis", 0.5)], route="lines"
            ),
            [Reply(text="…", model="claude-test")], [],
            worker_id=WORKER, meter=FixedLap(),
        )  # fmt: skip
        # On the question itself no sub-question moved: the page's rows are not re-read.
        assert event == SessionEvent(session.pk, thoughts=(n,), questions=False)
        # The loop knows how many thoughts there are without counting them again.
        assert stored.thought_count == n + 1
    session.refresh_from_db()
    # The format's health in the API and the download: two cycles read line by line.
    assert session.parse_routes == {"tags": 1, "lines": 2}
    # Two cycles counted, each thought in its own, and the header shows the focus.
    assert session.cycles == 2
    assert [t.cycle for t in session.thoughts.order_by("sequence")] == [0, 1]
    assert session.focus == session.question


def test_thoughts_citing_sources_that_do_not_exist_are_counted_for_the_page(
    make_session: Any,
):
    session = held(make_session, unknown_citations=1)  # one from an earlier synthesis
    for number in (1, 2):
        url = f"https://example.org/{number}"
        Source.objects.create(session=session, number=number, kind="web", url=url, key=url)
    reading = parsing.ThoughtReply(
        thoughts=[
            parsing.ParsedThought("Scattering, per [1] and [7].", "analysis", 0.6),
            parsing.ParsedThought("See [9] and [2].", "exploration", 0.4),
        ]
    )
    reply = Reply(text="…", model="claude-test")
    async_to_sync(steps.store_thoughts)(
        session.pk, steps.Focus(text=session.question), reading, [reply], [],
        worker_id=WORKER, meter=FixedLap(),
    )  # fmt: skip
    session.refresh_from_db()
    # "3 citations pointed to no source and are not linked."
    assert session.unknown_citations == 3


def test_a_cycle_counts_citations_no_source_has_reading_only_the_numbers_cited(
    make_session: Any,
):
    """Repeats included, from a read of the cited numbers only: none when the thoughts cite
    nothing (a session's sources grow with it, a cycle's citations do not)."""
    session = held(make_session)
    Source.objects.create(session=session, number=1, kind="web", url="https://a.org", key="a")

    def cycle(*texts: str) -> list[str]:
        reading = parsing.ThoughtReply(
            thoughts=[parsing.ParsedThought(text, "analysis", 0.5) for text in texts]
        )
        with CaptureQueriesContext(connection) as queries:
            async_to_sync(steps.store_thoughts)(
                session.pk, steps.Focus(text=session.question), reading,
                [Reply(text="…", model="claude-test")], [],
                worker_id=WORKER, meter=FixedLap(),
            )  # fmt: skip
        return [q["sql"] for q in queries.captured_queries if '"thinking_source"' in q["sql"]]

    assert cycle("No citation here.", "Nor here.") == []
    session.refresh_from_db()
    assert session.unknown_citations == 0
    [read] = cycle("Per [1] and [5].", "Again [5], and [1, 5].")
    session.refresh_from_db()
    assert session.unknown_citations == 3  # [5], three times
    assert "snippet" not in read


def test_citations_are_checked_against_source_numbers_not_row_ids(make_session: Any):
    session = held(make_session)
    # Numbers 7 and 9 (the earlier ones were deleted): the page links [7] and [9].
    for number in (7, 9):
        url = f"https://example.org/{number}"
        Source.objects.create(session=session, number=number, kind="web", url=url, key=url)
    reading = parsing.ThoughtReply(
        thoughts=[parsing.ParsedThought("Per [7], [9] and [1].", "analysis", 0.6)]
    )
    async_to_sync(steps.store_thoughts)(
        session.pk, steps.Focus(text=session.question), reading,
        [Reply(text="…", model="claude-test")], [],
        worker_id=WORKER, meter=FixedLap(),
    )  # fmt: skip
    session.refresh_from_db()
    assert session.unknown_citations == 1  # only [1]
