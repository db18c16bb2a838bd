"""The whole seed (#12), part by part: the final review's budget, re-ranking's parser, the
trend in words, the format's typed values and errors, the research switches at the doors
(form, API, CLI), steering and the stage history through the API, and what the page shows."""

from __future__ import annotations

import json
import re
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

from accounts.tokens import create_token
from tests.helpers import bearer, post
from thinking.deliberation import final_review, signals, stages
from thinking.deliberation.final_review import SubQuestionItem, SynthesisItem, ThoughtItem
from thinking.models import Stage, Status, SubQuestion, ThinkingSession, Thought
from thinking.page import trend
from thinking.provider import parsing

pytestmark = pytest.mark.django_db


# --- 6: the final answer reviews the whole session ----------------------------------------


def long_session() -> dict[str, Any]:
    thoughts = [
        ThoughtItem(n, "exploration", f"Filler thought number {n}. " + "padding " * 40, 0.4)
        for n in range(400)
    ]
    # An early, very confident thought: far outside "the last 20".
    thoughts[3] = ThoughtItem(3, "insight", "EARLY-KEY: the mechanism is feedback.", 0.95)
    syntheses = [
        SynthesisItem(n, f"SYNTHESIS-{n}: " + "understanding " * 60, 0.4 + n / 20, (f"Open {n}?",))
        for n in range(6)
    ]
    sub_questions = [
        SubQuestionItem("Explored one?", 8, True, "It holds."),
        SubQuestionItem("Never explored?", 6, False),
    ]
    return {"syntheses": syntheses, "thoughts": thoughts, "sub_questions": sub_questions}


def test_the_final_review_reads_every_synthesis_model_thought_and_sub_question_in_order(
    make_session: Any,
):
    from thinking.models import Synthesis

    session = make_session(status=Status.THINKING)
    for sequence, kind in enumerate(["insight", "scratchpad", "critique", "exploration"]):
        Thought.objects.create(
            session=session,
            sequence=sequence,
            cycle=sequence // 2 + 1,
            text=f"Thought {sequence}",
            type=kind,
            confidence=0.5 + sequence / 10,
            time_offset_seconds=sequence,
        )
    for sequence, final in ((1, False), (0, False), (2, True)):
        Synthesis.objects.create(
            session=session,
            sequence=sequence,
            text=f"Synthesis {sequence}",
            confidence=0.6,
            remaining_questions=[f"Open {sequence}?"] if sequence else [],
            time_offset_seconds=10,
            is_final=final,
        )
    later = SubQuestion.objects.create(session=session, text="Why?", priority=7)
    SubQuestion.objects.create(
        session=session, text="How?", priority=4, explored=True, answer="So.", parent=later
    )

    material = final_review.gather(session)
    assert material["syntheses"] == [
        SynthesisItem(0, "Synthesis 0", 0.6, ()),
        SynthesisItem(1, "Synthesis 1", 0.6, ("Open 1?",)),
    ]
    # The scratchpad is the model's working notes, not a thought the review weighs.
    assert material["thoughts"] == [
        ThoughtItem(0, "insight", "Thought 0", 0.5, 1),
        ThoughtItem(2, "critique", "Thought 2", 0.7, 2),
        ThoughtItem(3, "exploration", "Thought 3", 0.8, 2),
    ]
    assert material["sub_questions"] == [
        SubQuestionItem("Why?", 7, False, ""),
        SubQuestionItem("How?", 4, True, "So."),
    ]


def test_the_final_prompt_reviews_the_whole_session_within_its_budget():
    budget = 6000
    prompt = final_review.review_prompt(
        question="What drives it?", budget_tokens=budget, log=(), **long_session()
    )

    text = prompt.text
    assert final_review.estimate_tokens(text) <= budget
    assert all(f"SYNTHESIS-{n}:" in text for n in range(6)), "every synthesis"
    assert "EARLY-KEY: the mechanism is feedback." in text, "an early confident thought"
    assert "Filler thought number 399." in text, "the most recent thought"
    assert "Explored one? -> It holds." in text and "[6] Never explored?" in text
    assert "- Open 5?" in text and "- Open 0?" in text
    assert text.count("Filler thought number") < 400, "the budget left some out"


def test_a_tight_budget_still_carries_every_synthesis():
    prompt = final_review.review_prompt(question="Q?", budget_tokens=2500, log=(), **long_session())
    assert all(f"SYNTHESIS-{n}:" in prompt.text for n in range(6))
    assert final_review.estimate_tokens(prompt.text) <= 2500


def test_the_final_review_follows_the_cached_session_log():
    """The final answer keeps the cache-friendly layout: the consolidation header and the
    session log it shares with the syntheses come first, the review is the tail, and the
    thoughts the log carries are not repeated in it."""
    from thinking.deliberation import prompts

    material = long_session()
    for n, t in enumerate(material["thoughts"]):
        material["thoughts"][n] = ThoughtItem(t.sequence, t.type, t.text, t.confidence, n // 4)
    log = ("Cycle 31, focus: LOGGED-FOCUS\n- [insight, 0.90] LOGGED-THOUGHT",)

    prompt = final_review.review_prompt(
        question="What drives it?", budget_tokens=6000, log=log, logged_from_cycle=30,
        **material,
    )  # fmt: skip

    synthesis = prompts.synthesis_prompt(question="What drives it?", log=log)
    assert (prompt.stable, prompt.log) == (synthesis.stable, synthesis.log), "a shared prefix"
    assert "EARLY-KEY: the mechanism is feedback." in prompt.variable
    assert all(f"SYNTHESIS-{n}:" in prompt.variable for n in range(6))
    assert "[6] Never explored?" in prompt.variable
    assert "Filler thought number 399." not in prompt.variable, "cycle 99 is in the log"
    assert prompt.variable.rstrip().endswith('(the reply begins with "ANSWER:").')
    assert final_review.estimate_tokens(prompt.text) <= 6000


# --- 2: re-ranking replies ------------------------------------------------------------------


def test_rankings_are_read_tolerantly():
    reply = """Here is my ranking.
**QUESTION_ID:** [12]
PRIORITY: 9/10
WHY: New evidence on memory.
---
QUESTION ID: #7
Priority: 120
WHY: It can wait.
---
QUESTION_ID: 99
PRIORITY: 5
WHY: not asked about
---
QUESTION_ID: 12
PRIORITY: 1
---
QUESTION_ID: 8
WHY: no priority given"""
    rankings = parsing.parse_rankings(reply, known=[7, 8, 12])
    assert [(r.question_id, r.priority, r.why) for r in rankings] == [
        (12, 9, "New evidence on memory."),
        (7, 10, "It can wait."),
    ]
    assert parsing.parse_rankings("no blocks at all", known=[1]) == []


def test_a_ranking_block_that_cannot_be_used_does_not_end_the_reading():
    reply = (
        """QUESTION_ID: 3
WHY: no priority
---
QUESTION_ID: 99
PRIORITY: 4
---
QUESTION_ID: 4
PRIORITY: 6
---
QUESTION_ID: 4
PRIORITY: 2
---
QUESTION_ID: 5
PRIORITY: 7
WHY: """
        + "w" * 600
    )
    rankings = parsing.parse_rankings(reply, known=[3, 4, 5])
    assert [(r.question_id, r.priority) for r in rankings] == [(4, 6), (5, 7)]
    assert rankings[0].why == "", "a ranking without a reason has none"
    assert rankings[1].why == "w" * 500, "a reason is cut at 500 characters"


# --- 9: the trend in the seed's words -------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "kind"),
    [
        ([0.4, 0.55, 0.65, 0.75], "converging"),
        ([0.6, 0.62, 0.61, 0.62], "plateau"),
        ([0.5, 0.7, 0.55, 0.45], "falling"),
        ([0.5], ""),
    ],
)
def test_the_trend_is_read_from_the_syntheses(values: list[float], kind: str):
    assert trend.describe(values).kind == kind


def test_a_fall_after_a_peak_says_it_found_new_complexity():
    words = trend.describe([0.4, 0.8, 0.7, 0.6, 0.5]).words
    assert words.startswith("Falling after new complexity") and "after reaching 80%" in words


# --- 7: the format's own signals ------------------------------------------------------------


def test_a_typed_confidence_in_the_interactive_block_is_used():
    reply = (
        "<think>weighing</think><interactive><response>THOUGHT: Feedback drives it\n"
        'TYPE: insight</response><confidence type="number">0.85</confidence>'
        '<stop_signal type="boolean">false</stop_signal></interactive>'
    )
    reading = signals.read(reply, mode="standard")
    assert [t.confidence for t in reading.thoughts] == [0.85]
    # A thought's own CONFIDENCE line wins over the reply's.
    own = reply.replace("TYPE: insight", "TYPE: insight\nCONFIDENCE: 0.3")
    assert [t.confidence for t in signals.read(own, mode="standard").thoughts] == [0.3]


def test_format_problems_are_kept_per_cycle(make_session: Any):
    session = make_session(cycles=4)
    bad = signals.read('<confidence type="number">high</confidence> just prose', mode="standard")
    changes = signals.changes_for(session, bad)
    (entry,) = changes["format_errors"]
    assert entry["cycle"] == 4 and entry["route"] == "prose"
    assert any("confidence" in e for e in entry["errors"])
    clean = signals.read("THOUGHT: fine\nTYPE: insight\nCONFIDENCE: 0.6", mode="standard")
    assert signals.changes_for(session, clean) == {}


# --- 3: research switches at every door -----------------------------------------------------


@pytest.fixture
def api(alice: Any) -> Client:
    return bearer(create_token(alice, "script")[1])


def test_the_api_starts_a_session_without_research_or_web(
    api: Client, settings: Any, django_capture_on_commit_callbacks: Any, monkeypatch: Any
):
    settings.ANTHROPIC_API_KEY = "test-key"
    monkeypatch.setattr("thinking.people.actions.request_start", lambda pk: None)
    response = post(
        api, "/api/sessions", {"question": "Q?", "minutes": 1, "research": False, "web": False}
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["research"] is False and body["web"] is False
    session = ThinkingSession.objects.get()
    assert not session.research_enabled and not session.web_enabled
    default = post(api, "/api/sessions", {"question": "Q2?", "minutes": 1}).json()
    assert default["research"] is True and default["web"] is True


def test_the_start_form_labels_say_what_each_switch_does(client: Client, alice: Any):
    client.force_login(alice)
    page = client.get("/").content.decode()
    assert "Off: no plan, no searches, no evidence, no search tools" in page
    assert "Off: never search the web; only the knowledge base" in page


@pytest.mark.django_db(transaction=True)
def test_the_cli_thinks_without_research(fake_claude: Any, fake_exa: Any, alice: Any):
    out = StringIO()
    call_command(
        "think", "Why?", "--minutes", "0.05", "--owner", "alice", "--no-research", "--json",
        stdout=out, stderr=StringIO(),
    )  # fmt: skip
    doc = json.loads(out.getvalue())
    assert doc["research"] is False and doc["plan"] == {} and doc["sources"] == []
    assert fake_exa.searches == []


@pytest.mark.django_db(transaction=True)
def test_the_cli_thinks_without_the_web(fake_claude: Any, fake_exa: Any, alice: Any):
    out = StringIO()
    call_command(
        "think", "Why?", "--minutes", "0.05", "--owner", "alice", "--no-web", "--json",
        stdout=out, stderr=StringIO(),
    )  # fmt: skip
    doc = json.loads(out.getvalue())
    assert doc["research"] is True and doc["web"] is False and doc["plan"]["steps"]
    assert fake_exa.searches == []


# --- 4: steering and the whole state through the API ---------------------------------------


def test_a_script_steers_through_the_api(api: Client, make_session: Any, alice: Any):
    session = make_session(status=Status.THINKING)
    url = f"/api/sessions/{session.pk}/steer"

    hint = post(api, url, {"kind": "hint", "text": "  Consider sleep.  "})
    question = post(api, url, {"kind": "question", "text": "Does REM matter?"})

    assert hint.status_code == 201 and question.status_code == 201
    assert hint.json()["thought"]["type"] == "hint"
    assert hint.json()["thought"]["text"] == "Consider sleep."
    asked = SubQuestion.objects.get(session=session)
    assert asked.text == "Does REM matter?" and asked.priority == 10 and asked.added_by == alice
    assert Thought.objects.filter(session=session).count() == 2


def test_api_steering_follows_the_pages_rules(api: Client, make_session: Any, bob: Any, alice: Any):
    session = make_session(status=Status.COMPLETED)
    url = f"/api/sessions/{session.pk}/steer"
    assert post(api, url, {"kind": "hint", "text": "late"}).status_code == 409
    live = make_session(status=Status.THINKING)
    live_url = f"/api/sessions/{live.pk}/steer"
    assert post(api, live_url, {"kind": "hint", "text": "   "}).status_code == 422
    assert post(api, live_url, {"kind": "order", "text": "x"}).status_code == 422
    assert post(api, live_url, {"kind": "hint", "text": "x" * 1001}).status_code == 422
    bob_api = bearer(create_token(bob, "script")[1])
    assert post(bob_api, live_url, {"kind": "hint", "text": "hi"}).status_code == 404
    # Access before the body: a bad body does not reveal that the session exists.
    assert post(bob_api, live_url, {"kind": 1}).status_code == 404
    assert post(api, live_url, {"kind": 1}).json()["detail"][0]["loc"][:2] == ["body", "payload"]
    assert post(Client(), live_url, {"kind": "hint", "text": "hi"}).status_code == 401
    assert not Thought.objects.filter(session__in=[session, live]).exists()


def test_the_api_detail_carries_plan_stages_notes_citations_and_routes(
    api: Client, make_session: Any
):
    session = make_session(
        plan={"steps": ["Clarify", "Gather"], "current": 0},
        research_notes=["Web search for 'x' failed: timed out"],
        unknown_citations=2,
        parse_routes={"tags": 3, "prose": 1},
        format_errors=[{"cycle": 2, "route": "prose", "errors": ["no THOUGHT blocks"]}],
    )
    stages.record_sync(session.pk, stages.entry("research", "Searching: 2 web queries"))
    body = api.get(f"/api/sessions/{session.pk}").json()
    assert body["plan"]["steps"] == ["Clarify", "Gather"]
    assert body["stages"][0]["stage"] == "research"
    assert body["stages"][0]["message"] == "Searching: 2 web queries"
    assert body["progress"]["message"] == "Searching: 2 web queries"
    assert body["research_notes"] == ["Web search for 'x' failed: timed out"]
    assert body["unknown_citations"] == 2
    assert body["parse_routes"] == {"tags": 3, "prose": 1}
    assert body["format_errors"][0]["cycle"] == 2
    export = json.loads(api.get(f"/api/sessions/{session.pk}/export").getvalue())
    assert set(export["stages"][0]) >= {"stage", "label", "message", "at"}
    assert export["format_errors"] == body["format_errors"]


def test_the_stage_history_keeps_its_newest_entries_a_row_each(
    api: Client, client: Client, alice: Any, make_session: Any, monkeypatch: Any
):
    """Each stage entered is a row of its own, counted on the session; past MAX_STAGES the
    oldest go, a batch at a time, and the API, the export and the page serve the newest,
    oldest first. A finished session's history is closed."""
    monkeypatch.setattr(stages, "MAX_STAGES", 22)
    monkeypatch.setattr(stages, "PRUNE_EVERY", 2)
    session = make_session(status=Status.THINKING)
    for n in range(1, 26):
        assert stages.record_sync(session.pk, stages.entry("analysis", f"Entry {n}"))
    session.refresh_from_db()
    assert session.stage_count == 25 and session.progress["message"] == "Entry 25"
    # Pruned at 24 (entries 1 and 2 went); each row as it was stored, never rewritten.
    rows = Stage.objects.filter(session=session).order_by("sequence")
    assert [r.sequence for r in rows] == list(range(3, 26))
    assert [r.entry["message"] for r in rows] == [f"Entry {n}" for n in range(3, 26)]
    newest = [f"Entry {n}" for n in range(4, 26)]
    assert [s["message"] for s in api.get(f"/api/sessions/{session.pk}").json()["stages"]] == newest
    export = json.loads(api.get(f"/api/sessions/{session.pk}/export").getvalue())
    assert [s["message"] for s in export["stages"]] == newest
    client.force_login(alice)
    page = client.get(session.get_absolute_url()).content.decode()
    assert "Stages so far (25; the latest 20 here, the latest 22 in the JSON export)" in page
    assert "{#" not in page and "#}" not in page, "no template comment shows as text"

    ThinkingSession.objects.filter(pk=session.pk).update(status=Status.COMPLETED)
    assert not stages.record_sync(session.pk, stages.entry("note", "Too late"))
    session.refresh_from_db()
    assert session.stage_count == 25 and session.progress["message"] == "Entry 25"
    assert not Stage.objects.filter(session=session, entry__message="Too late").exists()


def test_stages_entered_together_are_numbered_in_order_and_pruned_on_the_same_schedule(
    make_session: Any, monkeypatch: Any
):
    """The loop enters a few stages in one transaction (the final answer's review and its
    answer): each is a row in order, the last is the progress line, and the oldest rows go
    whenever the count passes a multiple of PRUNE_EVERY, as they do one entry at a time."""
    monkeypatch.setattr(stages, "MAX_STAGES", 22)
    monkeypatch.setattr(stages, "PRUNE_EVERY", 4)
    session = make_session(status=Status.THINKING)
    for batch in range(10):  # 30 entries, three at a time
        entries = [stages.entry("analysis", f"Entry {3 * batch + n}") for n in (1, 2, 3)]
        assert stages.record_sync(session.pk, *entries)
    session.refresh_from_db()
    assert session.stage_count == 30 and session.progress["message"] == "Entry 30"
    # The batch that passed 28 pruned to the newest 22 (its count is no multiple of 4).
    rows = Stage.objects.filter(session=session).order_by("sequence")
    assert [(r.sequence, r.entry["message"]) for r in rows] == [
        (n, f"Entry {n}") for n in range(9, 31)
    ]


def test_each_page_draws_its_own_sessions_stage_lines_escaped(
    client: Client, alice: Any, make_session: Any
):
    """Each session's page shows its own stage entries, the model's text escaped."""
    first, second = (make_session(status=Status.THINKING) for _ in range(2))
    for session, name in ((first, "first"), (second, "second")):
        for n in range(3):
            line = stages.entry("note", f"<b>{name}</b> note {n}", by="model")
            assert stages.record_sync(session.pk, line)
    client.force_login(alice)
    for session, name, other in ((first, "first", "second"), (second, "second", "first")):
        page = client.get(session.get_absolute_url()).content.decode()
        history = page[page.index('class="stage-history"') :]
        history = history[: history.index("</ol>")]
        shown = re.findall(rf"&lt;b&gt;{name}&lt;/b&gt; note (\d)", history)
        assert shown == ["2", "1", "0"]
        assert other not in history and "<b>" not in history


def plan_region(session: ThinkingSession) -> str:
    """The plan region as the page and the live stream draw it."""
    from django.template.loader import render_to_string

    from thinking.page.presenters import plan_context

    return render_to_string("thinking/_plan.html", {"session": session, **plan_context(session)})


def test_the_stage_count_and_latest_stage_agree_with_the_lines_shown(make_session: Any):
    """A stage entered between reading the session and drawing its plan region: the count,
    the latest stage and the history all show it (one read), not the row's older count."""
    session = make_session(status=Status.THINKING)
    for n in range(3):
        assert stages.record_sync(session.pk, stages.entry("analysis", f"Entry {n}"))
    read_before = ThinkingSession.objects.get(pk=session.pk)
    assert stages.record_sync(session.pk, stages.entry("synthesis", "Entry 3"))

    region = plan_region(read_before)
    assert read_before.stage_count == 3 and "Stages so far (4)" in region
    latest, history = region.split('class="stage-history"')
    assert '<p class="progress-line stage-synthesis">' in latest and "Entry 3" in latest
    assert re.findall(r"Entry \d", history) == [f"Entry {n}" for n in (3, 2, 1, 0)]


def test_sub_questions_carry_their_initial_priority(api: Client, make_session: Any):
    session = make_session()
    moved = SubQuestion.objects.create(
        session=session,
        text="Moved?",
        priority=9,
        initial_priority=3,
        priority_changes=[{"from": 3, "to": 9, "why": "new evidence", "cycle": 2, "at": "x"}],
    )
    SubQuestion.objects.create(session=session, text="Still?", priority=4)
    rows = {r["text"]: r for r in api.get(f"/api/sessions/{session.pk}/sub-questions").json()}
    assert (rows["Moved?"]["priority"], rows["Moved?"]["initial_priority"]) == (9, 3)
    assert (rows["Still?"]["priority"], rows["Still?"]["initial_priority"]) == (4, 4)
    export = json.loads(api.get(f"/api/sessions/{session.pk}/export").getvalue())
    assert export["sub_questions"][0]["initial_priority"] in (3, 4)
    assert moved.priority_changes[0]["why"] == "new evidence"


# --- what the page shows ------------------------------------------------------------------


def test_the_page_shows_stages_moves_and_the_trend(client: Client, alice: Any, make_session: Any):
    session = make_session(
        status=Status.THINKING,
        plan={"steps": ["Clarify", "Gather", "Test"], "current": 0},
        confidence_evolution=[0.4, 0.55, 0.7],
    )
    for n, value in enumerate(session.confidence_evolution):
        session.syntheses.create(sequence=n, text="s", confidence=value, time_offset_seconds=n)
    stages.record_sync(session.pk, stages.entry("analysis", "Thinking about: the focus"))
    report = stages.entry(
        "research", "Reading <b>two</b> studies", label="Evidence", by="model",
        plan_step=2, total_steps=3, confidence="medium", metadata={"studies": "2"},
    )  # fmt: skip
    stages.record_sync(session.pk, report)
    SubQuestion.objects.create(
        session=session, text="Moved?", priority=9, initial_priority=3,
        priority_changes=[{"from": 3, "to": 9, "why": "Fresh evidence", "cycle": 2, "at": "x"}],
    )  # fmt: skip
    client.force_login(alice)

    page = client.get(session.get_absolute_url()).content.decode()

    assert "Reading &lt;b&gt;two&lt;/b&gt; studies" in page  # the model's words, escaped
    assert "step 2 of 3" in page and "confidence: medium" in page and "studies: 2" in page
    assert "Thinking about: the focus" in page  # the history keeps the loop's own stage
    assert "priority 3 → 9" in page and "Re-ranked: Fresh evidence" in page
    assert "Converging: confidence rose from 40% to 70%" in page
    assert 'class="step-done"' in page and 'class="step-current"' in page


def test_the_plan_checklist_never_moves_on_elapsed_time(make_session: Any):
    def states(session: Any) -> list[str]:
        return re.findall(r'class="step-(\w+)"', plan_region(session))

    session = make_session(
        status=Status.THINKING,
        plan={"steps": ["A", "B", "C", "D"], "current": 0},
        active_seconds=55.0,  # 90% of the budget used, nothing reported
    )
    assert states(session) == ["todo"] * 4
    session.status = Status.COMPLETED
    assert states(session) == ["done"] * 4


def test_the_plan_checklist_follows_each_reported_step_and_escapes_the_plan(make_session: Any):
    """A step reported moves the checklist; the same plan in another session, or the loop's
    own plan, is drawn as its own."""
    steps = ["Read <b>the</b> studies", "Compare them", "Decide"]
    session = make_session(status=Status.THINKING, plan={"steps": steps, "step_reported": True})
    drawn = plan_region(session)
    assert re.findall(r'class="step-(\w+)"', drawn) == ["current", "todo", "todo"]
    assert "Read &lt;b&gt;the&lt;/b&gt; studies" in drawn and "<b>" not in drawn
    assert "A simple plan" not in drawn
    session.plan = {**session.plan, "current": 2}
    drawn = plan_region(session)
    assert re.findall(r'class="step-(\w+)"', drawn) == ["done", "done", "current"]
    # The same plan at the same step, made by the heuristic planner: drawn with its hint.
    heuristic = make_session(
        status=Status.THINKING,
        plan={"steps": steps, "source": "heuristic", "current": 2, "step_reported": True},
    )
    drawn = plan_region(heuristic)
    assert re.findall(r'class="step-(\w+)"', drawn) == ["done", "done", "current"]
    assert "A simple plan made from the question's key terms." in drawn
    # Another session with the same plan: its own progress decides, here nothing reported
    # yet, there a step reported by the model's progress tool.
    quiet = make_session(status=Status.THINKING, plan={"steps": steps, "current": 2})
    assert re.findall(r'class="step-(\w+)"', plan_region(quiet)) == ["todo"] * 3
    told = make_session(
        status=Status.THINKING,
        plan={"steps": steps, "current": 1},
        progress={"message": "Comparing", "plan_step": 2},
    )
    drawn = plan_region(told)
    assert re.findall(r'class="step-(\w+)"', drawn) == ["done", "current", "todo"]
    assert 'class="plan"' not in plan_region(make_session(plan={}))


def test_the_admin_shows_the_stage_history_and_format_errors(admin_client: Client, make_session):
    session = make_session(
        format_errors=[{"cycle": 1, "route": "prose", "errors": ["no THOUGHT blocks"]}]
    )
    stages.record_sync(session.pk, stages.entry("note", "A <script> note", by="model"))
    page = admin_client.get(f"/admin/thinking/thinkingsession/{session.pk}/change/")
    html = page.content.decode()
    assert "A &lt;script&gt; note" in html and "no THOUGHT blocks" in html


def test_re_ranking_is_due_every_few_cycles_and_when_new_evidence_arrives(
    make_session: Any, settings: Any
):
    from thinking.deliberation import rerank

    settings.DEEPTHINK_RERANK_EVERY = 3
    session = make_session(cycles=4, cycles_at_last_rerank=3, sources_at_last_rerank=5)
    assert not rerank.due(session, source_count=5, open_count=4)
    assert rerank.due(session, source_count=6, open_count=4), "new evidence arrived"
    session.cycles = 6
    assert rerank.due(session, source_count=5, open_count=4), "three cycles since"
    assert not rerank.due(session, source_count=9, open_count=1), "nothing to order"
    # About to write the final answer anyway: its time is up, or a person asked it to stop.
    session.active_seconds = session.budget_seconds
    assert not rerank.due(session, source_count=9, open_count=4), "time is up"
    session.active_seconds = 0
    session.stop_requested = True
    assert not rerank.due(session, source_count=9, open_count=4), "asked to stop"


def test_the_re_ranking_prompt_shows_what_it_is_given():
    from thinking.deliberation import prompts
    from thinking.deliberation.rerank import OpenQuestion, rerank_prompt

    asked = [OpenQuestion(7, "Why tides?", 4), OpenQuestion(9, "Why reefs?", 6)]
    full = rerank_prompt(
        question="How do oceans work?",
        open_questions=asked,
        understanding="Tides follow the moon.",
        recent=[prompts.ThoughtLine("insight", "The moon pulls.", 0.8)],
        new_sources=2,
        background="An earlier answer.",
    )
    assert full.stable.startswith(
        "<earlier_session>\nAn earlier answer.\n</earlier_session>\n\n"
        "Original Question: How do oceans work?\n\nRe-rank the open sub-questions below"
    )
    assert full.variable == "\n".join(
        [
            "Current understanding:",
            "Tides follow the moon.",
            "New sources since the last ranking: 2.",
            "",
            "Recent thoughts:",
            "- [insight, 0.80] The moon pulls.",
            "",
            "Open sub-questions:",
            "[7] Why tides? (priority now 4)",
            "[9] Why reefs? (priority now 6)",
        ]
    )
    # A first ranking: no synthesis, no thoughts, no new source, not a follow-up.
    bare = rerank_prompt(
        question="How do oceans work?", open_questions=asked, understanding="", recent=[],
        new_sources=0,
    )  # fmt: skip
    assert bare.stable.startswith("Original Question: How do oceans work?\n")
    assert bare.variable.startswith(
        "Current understanding:\n(no synthesis yet)\n\nRecent thoughts:\n(none yet)\n\n"
    )


def test_the_planning_call_has_its_live_label():
    import time
    import uuid

    from thinking.events import LiveStep, SessionEvent
    from thinking.page.broadcast import render_live

    live = LiveStep("plan", time.time(), "Which queries?")
    html = render_live(SessionEvent(uuid.uuid4(), live=live))["parts"][0]["html"]
    assert "the research plan" in html


@pytest.mark.django_db(transaction=True)
def test_the_cli_prints_the_stages_as_the_loop_enters_them(fake_claude: Any, alice: Any):
    out = StringIO()
    call_command("think", "Why?", "--minutes", "0.05", stdout=out, stderr=StringIO())
    text = out.getvalue()
    assert "· planning: Planning the research" in text
    assert "· analysis: Thinking about: Why?" in text


def test_a_session_without_research_says_so(client: Client, alice: Any, make_session: Any):
    session = make_session(plan={}, research_enabled=False, status=Status.THINKING)
    client.force_login(alice)
    page = client.get(session.get_absolute_url()).content.decode()
    assert "Research is off for this session: no plan, no searches, no evidence." in page
    assert "Planning the research…" not in page


def test_a_teammate_may_steer_through_the_api_as_on_the_page(
    make_session: Any, alice: Any, django_user_model: Any
):
    from django.utils import timezone

    from accounts.models import Membership, Role, Team

    carol = django_user_model.objects.create_user("carol", password="carol-pass-123")
    team = Team.objects.create(name="Lab")
    now = timezone.now()
    Membership.objects.create(team=team, user=alice, role=Role.OWNER, accepted_at=now)
    Membership.objects.create(team=team, user=carol, role=Role.MEMBER, accepted_at=now)
    session = make_session(status=Status.PAUSED, team=team)
    carol_api = bearer(create_token(carol, "script")[1])

    response = post(
        carol_api, f"/api/sessions/{session.pk}/steer", {"kind": "question", "text": "Why?"}
    )

    assert response.status_code == 201
    assert SubQuestion.objects.get(session=session).added_by == carol
