"""The whole seed in the loop (#12): stages the loop reports itself, re-ranking, the research
switches and a pause that stops a model call in flight. Against the fake Claude and Exa."""

from __future__ import annotations

import asyncio
import datetime
import time
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from fakes.anthropic_server import HttpError, Reply
from research.knowledge import add_item
from tests.helpers import (
    WORKER,
    FrozenClock,
    claim,
    each_call_takes,
    needs_postgresql,
    prompt_of,
    run,
    stage_history,
    stopped_mid_stream,
    take_over,
)
from thinking.deliberation import evidence, loop
from thinking.deliberation.run import Meter, Run
from thinking.events import SessionEvent, publish_nothing
from thinking.models import (
    LeaseLost,
    Status,
    SubQuestion,
    Synthesis,
    ThinkingSession,
    Thought,
)
from thinking.provider.llm import LLM, LLMError

pytestmark = pytest.mark.django_db(transaction=True)


def never_reports_progress(fake_claude: Any) -> None:
    """The scripted model, with no tools offered to it: it never calls `progress`."""
    fake_claude.responder = lambda body: fake_claude.scripted_mind({**body, "tools": []})


async def test_stages_come_from_the_loop_when_the_model_never_reports_progress(
    fake_claude: Any, make_session: Any
):
    never_reports_progress(fake_claude)
    # Each call takes a second of the session's clock: the budget buys the same steps on
    # any machine (on real time, a fast one filled the history past what it keeps).
    frozen = FrozenClock()
    each_call_takes(fake_claude, frozen, 1.0)
    session = await sync_to_async(make_session)(
        plan={}, budget_seconds=20.0, synthesis_interval_seconds=8.0
    )

    await run(session, clock=frozen.clock)

    await session.arefresh_from_db()
    history = await stage_history(session)
    kinds = [item["stage"] for item in history]
    assert len(history) == session.stage_count, "the whole history is kept"
    assert kinds[0] == "planning"
    assert kinds.index("research") < kinds.index("analysis")
    assert {"planning", "research", "analysis", "reflection", "synthesis"} <= set(kinds)
    assert all(item["by"] == "loop" for item in history)
    assert all({"stage", "label", "message", "at"} <= set(item) for item in history)
    assert history[-1]["message"] == "Writing the final answer"
    # No step was reported, so the checklist did not move on its own before completion.
    assert not session.plan.get("step_reported")


async def test_a_progress_report_moves_the_plan_and_keeps_its_extras(
    fake_claude: Any, make_session: Any
):
    session = await sync_to_async(make_session)(
        plan={"steps": ["Clarify", "Gather", "Test", "Conclude"], "current": 0},
        budget_seconds=0.2,
        synthesis_interval_seconds=60,
    )
    report = {
        "stage": "analysis",
        "label": "Weighing sources",
        "message": "Comparing two accounts",
        "plan_step": 3,
        "total_steps": 4,
        "confidence": "moderate",
        "metadata": {"sources": 2, "nested": {"dropped": True}},
    }
    fake_claude.enqueue(
        Reply(text="Reporting.", tool_uses=[{"name": "progress", "input": report}]),
        Reply(text="THOUGHT: ok\nTYPE: insight\nCONFIDENCE: 0.7"),
    )
    never_reports_progress(fake_claude)

    await run(session)

    await session.arefresh_from_db()
    (item,) = [s for s in await stage_history(session) if s["by"] == "model"]
    assert item["label"] == "Weighing sources" and item["message"] == "Comparing two accounts"
    assert (item["plan_step"], item["total_steps"], item["confidence"]) == (3, 4, "moderate")
    assert item["metadata"] == {"sources": "2"}  # untrusted: scalars only, as text
    assert session.plan["current"] == 2 and session.plan["step_reported"]


async def rerank_now(session: ThinkingSession) -> ThinkingSession:
    """The re-ranking step alone, as the loop calls it after a cycle."""
    from thinking.deliberation import rerank

    await claim(session)
    llm = LLM.from_settings()
    research = await sync_to_async(evidence.Research.for_session)(session)
    run = Run(llm=llm, research=research, publish=publish_nothing, worker_id=WORKER, meter=Meter())
    try:
        return await rerank.maybe_rerank(session=session, run=run)
    finally:
        await research.close()
        await llm.close()


async def test_open_sub_questions_are_re_ranked_but_a_persons_keeps_its_place(
    fake_claude: Any, make_session: Any, alice: Any, settings: Any
):
    settings.DEEPTHINK_RERANK_EVERY = 3
    session = await sync_to_async(make_session)(cycles=3, status=Status.THINKING)
    mine = await SubQuestion.objects.acreate(
        session=session, text="My own question?", priority=10, added_by=alice
    )
    low = await SubQuestion.objects.acreate(session=session, text="Low one?", priority=2)
    await SubQuestion.objects.acreate(session=session, text="Middle one?", priority=5)
    await SubQuestion.objects.acreate(session=session, text="Top one?", priority=9)

    session = await rerank_now(session)

    (call,) = fake_claude.requests
    prompt = prompt_of(call)
    assert "QUESTION_ID:" in prompt and f"[{low.pk}] Low one?" in prompt
    assert f"[{mine.pk}]" not in prompt and "My own question?" not in prompt
    assert "thinking" not in call["body"]  # the fast model, thinking off
    await low.arefresh_from_db()
    await mine.arefresh_from_db()
    assert low.priority == 10 and low.initial_priority == 2
    assert low.priority_changes[0]["from"] == 2 and low.priority_changes[0]["to"] == 10
    assert low.priority_changes[0]["why"] == "New evidence makes this the most pressing"
    assert low.priority_changes[0]["cycle"] == 3
    assert mine.priority == 10 and mine.priority_changes == []
    await session.arefresh_from_db()
    assert session.cycles_at_last_rerank == 3
    history = await stage_history(session)
    assert [s["stage"] for s in history] == ["reflection", "reflection"]
    assert history[-1]["message"] == "Re-ranked the open sub-questions: 1 moved"


async def test_a_due_re_ranking_shows_its_stage_before_the_call_and_the_moves_after(
    fake_claude: Any, make_session: Any
):
    """The page is told of the re-ranking's stage before its call, then of the stage that
    says how many moved, with the moved questions, in one update."""
    from thinking.deliberation import rerank

    session = await sync_to_async(make_session)(cycles=5, status=Status.THINKING)
    for n, priority in ((1, 3), (2, 4), (3, 5)):
        await SubQuestion.objects.acreate(session=session, text=f"Q{n}?", priority=priority)
    await claim(session)
    events: list[SessionEvent] = []

    async def publish(event: SessionEvent) -> None:
        events.append(event)

    llm = LLM.from_settings()
    run_ = Run(llm=llm, research=None, publish=publish, worker_id=WORKER, meter=Meter())
    try:
        stored = await rerank.maybe_rerank(session=session, run=run_)
    finally:
        await llm.close()

    assert len(fake_claude.requests) == 1
    history = await stage_history(session)
    assert [s["message"] for s in history] == [
        "Re-ranking 3 open sub-questions",
        "Re-ranked the open sub-questions: 1 moved",
    ]
    assert stored.stage_count == 2 and stored.cycles_at_last_rerank == 5
    assert [(e.plan, e.questions) for e in events] == [(True, False), (True, True)]
    assert {e.session_id for e in events} == {session.pk}


async def test_a_session_that_ended_is_not_re_ranked(fake_claude: Any, make_session: Any):
    # Due, but finished before its turn came (a budget spent in another hop): no stage, no
    # call.
    from thinking.deliberation import rerank

    session = await sync_to_async(make_session)(cycles=5, status=Status.THINKING)
    for n, priority in ((1, 3), (2, 4)):
        await SubQuestion.objects.acreate(session=session, text=f"Q{n}?", priority=priority)
    await claim(session)
    await ThinkingSession.objects.filter(pk=session.pk).aupdate(status=Status.COMPLETED)
    llm = LLM.from_settings()
    run_ = Run(llm=llm, research=None, publish=publish_nothing, worker_id=WORKER, meter=Meter())
    try:
        assert await rerank.maybe_rerank(session=session, run=run_) is session
    finally:
        await llm.close()

    assert fake_claude.requests == []
    assert await stage_history(session) == []


async def test_re_ranking_waits_until_it_is_due(fake_claude: Any, make_session: Any):
    session = await sync_to_async(make_session)(cycles=1, status=Status.THINKING)
    for n, priority in ((1, 3), (2, 4)):
        await SubQuestion.objects.acreate(session=session, text=f"Q{n}?", priority=priority)

    await rerank_now(session)

    assert fake_claude.requests == []


async def test_only_open_model_asked_questions_and_new_sources_make_a_re_ranking_due(
    fake_claude: Any, make_session: Any, alice: Any
):
    """Checked every cycle: a person's question, an explored one and another session's do
    not count as open, and only this session's sources found since the last re-ranking make
    one due before its cycle comes."""
    from thinking.deliberation import rerank
    from thinking.models import Source

    session = await sync_to_async(make_session)(cycles=1, status=Status.THINKING)
    other = await sync_to_async(make_session)(cycles=1, status=Status.THINKING)
    await SubQuestion.objects.acreate(session=session, text="Open?", priority=3)
    await SubQuestion.objects.acreate(session=session, text="Done?", priority=4, explored=True)
    await SubQuestion.objects.acreate(session=session, text="Mine?", priority=5, added_by=alice)
    for n in (1, 2, 3):
        await SubQuestion.objects.acreate(session=other, text=f"Elsewhere {n}?", priority=n)
        await Source.objects.acreate(session=other, number=n, kind="web", key=f"k{n}")
    for n in (1, 2):
        await Source.objects.acreate(session=session, number=n, kind="web", key=f"k{n}")
    await claim(session)
    llm = LLM.from_settings()
    run = Run(llm=llm, research=None, publish=publish_nothing, worker_id=WORKER, meter=Meter())

    async def step(sources_seen: int) -> None:
        await ThinkingSession.objects.filter(pk=session.pk).aupdate(
            sources_at_last_rerank=sources_seen
        )
        await session.arefresh_from_db()
        await rerank.maybe_rerank(session=session, run=run)

    try:
        await step(0)  # new sources, but one open question of the model's: nothing to order
        await SubQuestion.objects.acreate(session=session, text="Also open?", priority=6)
        await step(2)  # two open now; no new source of its own, and not its cycle yet
        assert fake_claude.requests == []
        await Source.objects.acreate(session=session, number=3, kind="web", key="k3")
        await step(2)  # a new source: due
    finally:
        await llm.close()

    [request] = fake_claude.requests
    shown = prompt_of(request)
    assert "Open?" in shown and "Also open?" in shown
    assert not any(text in shown for text in ("Done?", "Mine?", "Elsewhere"))


async def check_what_a_re_ranking_is_shown_and_moves(
    fake_claude: Any, make_session: Any, alice: Any
) -> None:
    from thinking.deliberation import prompts, rerank

    """The model is shown the twenty open questions of its own that come first (by
    priority, then age), the newest synthesis and the last eight of its thoughts, oldest
    first; its reply moves only those, each keeping the last twenty of its moves."""
    session = await sync_to_async(make_session)(cycles=4, status=Status.THINKING)
    asked = [
        await SubQuestion.objects.acreate(session=session, text=f"Open {n}?", priority=n % 3 + 2)
        for n in range(22)
    ]
    done = await SubQuestion.objects.acreate(
        session=session, text="Done?", priority=9, explored=True
    )
    mine = await SubQuestion.objects.acreate(
        session=session, text="Mine?", priority=9, added_by=alice
    )
    other = await sync_to_async(make_session)()
    await SubQuestion.objects.acreate(session=other, text="Elsewhere?", priority=10)
    kinds = ["exploration"] * 3 + ["critique", "scratchpad", "hint"] + ["insight"] * 6
    for n, kind in enumerate(kinds):
        await Thought.objects.acreate(
            session=session, sequence=n, type=kind, text=f"Thought {n}", confidence=n / 20,
            time_offset_seconds=n,
        )  # fmt: skip
    for n in range(2):
        await Synthesis.objects.acreate(
            session=session, sequence=n, text=f"Synthesis {n}", confidence=0.5,
            time_offset_seconds=n,
        )  # fmt: skip
    # Of equal priority, the older first: the newest question is made the oldest of all.
    oldest = await SubQuestion.objects.order_by("created_at").values_list("created_at").afirst()
    assert oldest is not None
    await SubQuestion.objects.filter(pk=asked[-1].pk).aupdate(
        created_at=oldest[0] - datetime.timedelta(hours=1)
    )
    asked = [q async for q in SubQuestion.objects.filter(pk__in=[q.pk for q in asked])]
    asked.sort(key=lambda q: (-q.priority, q.created_at))
    history = [
        {"from": 1, "to": 2, "why": f"move {n}", "cycle": n, "at": "then"} for n in range(20)
    ]
    first = asked[0]
    await SubQuestion.objects.filter(pk=first.pk).aupdate(
        priority_changes=history, initial_priority=1
    )
    shown = asked[:20]
    # The reply moves the first shown, keeps the second where it is, and names one it was not
    # shown, an explored one and a person's: those are not moved.
    left_out = asked[20]
    blocks = [
        (first.pk, 10, "Most pressing now"),
        (shown[1].pk, shown[1].priority, "Where it was"),
        *((q.pk, 10, "Not shown") for q in (left_out, done, mine)),
    ]
    fake_claude.enqueue(
        Reply(
            text="\n---\n".join(
                f"QUESTION_ID: [{i}]\nPRIORITY: {p}\nWHY: {w}" for i, p, w in blocks
            )
        )
    )

    stored = await rerank_now(session)

    [request] = fake_claude.requests
    # The fast model (here the session's own), thinking off, with the loop's system prompt.
    assert request["body"]["model"] == session.model_id
    assert request["body"]["max_tokens"] == rerank.RERANK_MAX_TOKENS
    assert request["body"]["system"][0]["text"] == prompts.system(session.language)
    prompt = prompt_of(request)
    assert "Original Question: What is consciousness?" in prompt
    assert "New sources" not in prompt  # none since the last ranking
    listed = prompt[prompt.index("Open sub-questions:") :].splitlines()[1:]
    assert listed == [f"[{q.pk}] {q.text} (priority now {q.priority})" for q in shown]
    assert "Synthesis 1" in prompt and "Synthesis 0" not in prompt
    recent = prompt[prompt.index("Recent thoughts:") : prompt.index("Open sub-questions:")]
    assert (
        recent.split("\n")[1:9]
        == [
            f"- [{kind}, {n / 20:.2f}] Thought {n}"
            for n, kind in list(enumerate(kinds))
            if kind not in ("scratchpad", "hint")
        ][-8:]
    )
    rows = {q.pk: q async for q in SubQuestion.objects.filter(session=session)}
    moved = rows[first.pk]
    assert (moved.priority, moved.initial_priority) == (10, 1)
    assert [c["why"] for c in moved.priority_changes] == [
        *(f"move {n}" for n in range(1, 20)),
        "Most pressing now",
    ]
    change = moved.priority_changes[-1]
    assert (change["from"], change["to"], change["cycle"]) == (first.priority, 10, 4)
    assert datetime.datetime.fromisoformat(change["at"]).tzinfo is not None
    for q in (shown[1], left_out, done, mine):
        assert (rows[q.pk].priority, rows[q.pk].priority_changes) == (q.priority, [])
    history_now = await stage_history(stored)
    assert history_now[-1]["message"] == "Re-ranked the open sub-questions: 1 moved"


async def test_what_a_re_ranking_is_shown_and_what_it_moves(
    fake_claude: Any, make_session: Any, alice: Any
):
    await check_what_a_re_ranking_is_shown_and_moves(fake_claude, make_session, alice)


@pytest.mark.services
async def test_what_a_re_ranking_is_shown_and_what_it_moves_on_postgresql(
    fake_claude: Any, make_session: Any, alice: Any
):
    needs_postgresql()
    await check_what_a_re_ranking_is_shown_and_moves(fake_claude, make_session, alice)


def check_rankings_move_only_open_questions_of_the_models(make_session: Any, alice: Any) -> None:
    """Not from a reply only (it ranks at most the twenty it was shown): more are read twenty
    at a time."""
    from thinking.deliberation import rerank
    from thinking.provider import parsing

    session = make_session(cycles=2)
    asked = [
        SubQuestion.objects.create(session=session, text=f"Q{n}?", priority=3) for n in range(22)
    ]
    done = SubQuestion.objects.create(session=session, text="Done?", priority=3, explored=True)
    mine = SubQuestion.objects.create(session=session, text="Mine?", priority=3, added_by=alice)
    rankings = [parsing.ParsedRanking(q.pk, 7, "up") for q in [*asked, done, mine]]
    with transaction.atomic():
        assert rerank.apply_rankings(session, rankings) == 22
        assert rerank.apply_rankings(session, rankings[:3]) == 0  # where they were asked to be
        # A few, in one read: one already where it is asked to be (a later one still moves),
        # and the explored one and the person's stay put here too.
        few = [parsing.ParsedRanking(q.pk, 8, "further") for q in (asked[-1], done, mine)]
        assert rerank.apply_rankings(session, [rankings[0], *few]) == 1
    priorities = dict(SubQuestion.objects.values_list("pk", "priority"))
    assert priorities == {
        **{q.pk: 7 for q in asked[:-1]},
        asked[-1].pk: 8,
        done.pk: 3,
        mine.pk: 3,
    }
    last = SubQuestion.objects.get(pk=asked[-1].pk)
    assert [(c["from"], c["to"]) for c in last.priority_changes] == [(3, 7), (7, 8)]
    assert last.initial_priority == 3
    assert rerank.apply_rankings(session, []) == 0


def test_rankings_move_only_open_questions_of_the_models(make_session: Any, alice: Any):
    check_rankings_move_only_open_questions_of_the_models(make_session, alice)


@pytest.mark.services
def test_rankings_move_only_open_questions_of_the_models_on_postgresql(
    make_session: Any, alice: Any
):
    needs_postgresql()
    with CaptureQueriesContext(connection) as queries:
        check_rankings_move_only_open_questions_of_the_models(make_session, alice)
    # The rows it moves are read by key, once per re-ranking, locked as it reads.
    ranked = [
        q["sql"]
        for q in queries
        if q["sql"].startswith("SELECT") and "priority_changes" in q["sql"] and " IN (" in q["sql"]
    ]
    assert len(ranked) == 3
    assert all(sql.startswith("SELECT") and sql.endswith("FOR UPDATE") for sql in ranked)


async def three_open_questions(make_session: Any, **fields: Any) -> ThinkingSession:
    session = await sync_to_async(make_session)(cycles=5, status=Status.THINKING, **fields)
    for n, priority in ((1, 3), (2, 4), (3, 5)):
        await SubQuestion.objects.acreate(session=session, text=f"Q{n}?", priority=priority)
    await claim(session)
    return session


async def rerank_with(
    session: ThinkingSession, meter: Meter, publish: Any = publish_nothing
) -> ThinkingSession:
    from thinking.deliberation import rerank

    llm = LLM.from_settings()
    run_ = Run(llm=llm, research=None, publish=publish, worker_id=WORKER, meter=meter)
    try:
        return await rerank.maybe_rerank(session=session, run=run_)
    finally:
        await llm.close()


async def priorities(session: ThinkingSession) -> list[tuple[int, list]]:
    rows = SubQuestion.objects.filter(session=session).order_by("pk")
    return [(q.priority, q.priority_changes) async for q in rows]


async def test_a_re_rankings_call_counts_as_thinking_time_and_its_sources_are_remembered(
    fake_claude: Any, make_session: Any
):
    from thinking.models import Source

    session = await three_open_questions(make_session, parent_context="An earlier answer.")
    for n in (1, 2, 3):
        await Source.objects.acreate(session=session, number=n, kind="web", key=f"k{n}")
    await ThinkingSession.objects.filter(pk=session.pk).aupdate(sources_at_last_rerank=1)
    await session.arefresh_from_db()
    before = session.active_seconds
    frozen = FrozenClock()
    each_call_takes(fake_claude, frozen, 4.0)

    stored = await rerank_with(session, Meter(frozen))

    assert stored.active_seconds == pytest.approx(before + 4.0)
    prompt = prompt_of(fake_claude.requests[0])
    assert prompt.startswith("<earlier_session>\nAn earlier answer.\n</earlier_session>")
    assert "Current understanding:\n(no synthesis yet)" in prompt
    assert "New sources since the last ranking: 2." in prompt
    # The next re-ranking is due on new sources only: these three are seen.
    assert (stored.cycles_at_last_rerank, stored.sources_at_last_rerank) == (5, 3)


async def test_a_failed_re_ranking_moves_nothing_says_so_and_waits_its_turn(
    fake_claude: Any, make_session: Any, caplog: pytest.LogCaptureFixture
):
    session = await three_open_questions(make_session)
    before = await priorities(session)
    fake_claude.enqueue(HttpError(400, "invalid_request_error", "bad"))

    with caplog.at_level("WARNING", logger="thinking.deliberation.rerank"):
        stored = await rerank_with(session, Meter())

    [logged] = [r.getMessage() for r in caplog.records if r.name == "thinking.deliberation.rerank"]
    assert logged.startswith(f"Session {session.pk}: re-ranking skipped: The model provider")

    assert await priorities(session) == before
    history = await stage_history(stored)
    assert history[-1]["message"] == "Re-ranking failed"
    assert stored.cycles_at_last_rerank == 5
    assert not await session.model_calls.filter(purpose="rerank").aexists()


async def test_a_worker_that_lost_its_lease_moves_nothing(fake_claude: Any, make_session: Any):
    session = await three_open_questions(make_session)
    before = await priorities(session)
    respond = fake_claude.responder

    def taken_over_meanwhile(body: dict) -> Any:
        take_over(session.pk)  # another worker claims it while the model ranks
        return respond(body)

    fake_claude.responder = taken_over_meanwhile

    with pytest.raises(LeaseLost):
        await rerank_with(session, Meter())

    assert len(fake_claude.requests) == 1
    assert await priorities(session) == before
    assert not await session.model_calls.filter(purpose="rerank").aexists()


class Refusing:
    """A model client whose every call fails with `kind`."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    async def utility(self, *args: Any, **kwargs: Any) -> Any:
        raise LLMError("no", kind=self.kind)


@pytest.mark.parametrize("kind", ["auth", "not_configured"])
async def test_a_re_ranking_refused_for_want_of_credentials_stops_the_session(
    make_session: Any, kind: str
):
    """A failed call is skipped, but one that no later call can get past ends the session."""
    from thinking.deliberation import rerank

    session = await three_open_questions(make_session)
    before = await priorities(session)
    run_ = Run(
        llm=Refusing(kind), research=None, publish=publish_nothing, worker_id=WORKER,
        meter=Meter(),
    )  # fmt: skip
    with pytest.raises(LLMError) as raised:
        await rerank.maybe_rerank(session=session, run=run_)
    assert raised.value.kind == kind
    assert await priorities(session) == before


async def test_a_worker_that_lost_its_lease_before_a_re_ranking_neither_enters_nor_asks(
    fake_claude: Any, make_session: Any
):
    session = await three_open_questions(make_session)
    await sync_to_async(take_over)(session.pk)

    with pytest.raises(LeaseLost):
        await rerank_with(session, Meter())

    assert fake_claude.requests == []
    assert await stage_history(session) == []


async def test_a_pause_stops_a_re_ranking_in_flight_and_its_time_is_not_counted(
    fake_claude: Any, make_session: Any, settings: Any
):
    from thinking.deliberation.interrupt import Interrupted

    settings.DEEPTHINK_INTERRUPT_POLL_SECONDS = 0.05
    session = await three_open_questions(make_session)
    before = await priorities(session)
    frozen = FrozenClock()
    respond = fake_claude.responder

    def paused_meanwhile(body: dict) -> Any:
        frozen.advance(7.0)
        try:
            ThinkingSession.objects.filter(pk=session.pk).update(status=Status.PAUSED)
        finally:
            connection.close()
        time.sleep(1.0)  # the answer comes after the pause is seen
        return respond(body)

    fake_claude.responder = paused_meanwhile
    meter = Meter(frozen)

    with pytest.raises(Interrupted) as raised:
        await rerank_with(session, meter)

    assert (raised.value.session_id, raised.value.status) == (session.pk, "paused")
    assert meter.pending() == 0  # the unfinished call is not thinking time
    assert await priorities(session) == before


async def test_re_ranking_uses_the_fast_model_when_one_is_set(
    fake_claude: Any, make_session: Any, settings: Any
):
    settings.DEEPTHINK_FAST_MODEL = "claude-fast-test"
    session = await sync_to_async(make_session)(cycles=5, status=Status.THINKING)
    for n, priority in ((1, 3), (2, 4), (3, 5)):
        await SubQuestion.objects.acreate(session=session, text=f"Q{n}?", priority=priority)

    await rerank_now(session)

    assert [r["body"]["model"] for r in fake_claude.requests] == ["claude-fast-test"]
    assert await session.model_calls.filter(purpose="rerank", model="claude-fast-test").aexists()


async def test_the_loop_re_ranks_as_it_goes(fake_claude: Any, make_session: Any, settings: Any):
    settings.DEEPTHINK_RERANK_EVERY = 1
    never_reports_progress(fake_claude)
    session = await sync_to_async(make_session)(budget_seconds=3, synthesis_interval_seconds=60)
    for n, priority in ((1, 3), (2, 4), (3, 5)):
        await SubQuestion.objects.acreate(session=session, text=f"Q{n}?", priority=priority)

    await run(session)

    assert await session.model_calls.filter(purpose="rerank").aexists()
    assert await SubQuestion.objects.filter(
        session=session, initial_priority__isnull=False
    ).aexists()


async def test_research_off_means_no_plan_no_searches_no_evidence_no_research_tools(
    fake_claude: Any, fake_exa: Any, make_session: Any, alice: Any
):
    await sync_to_async(add_item)(owner=alice, title="Dreams", body="REM sleep replays memory.")
    session = await sync_to_async(make_session)(
        plan={}, research_enabled=False, question="Why do we dream?", budget_seconds=0.3
    )

    await run(session)

    await session.arefresh_from_db()
    assert session.status == Status.COMPLETED
    assert session.plan == {}
    assert fake_exa.searches == []
    assert await session.sources.acount() == 0
    prompts = [prompt_of(r) for r in fake_claude.requests]
    assert not any("WEB QUERIES:" in p for p in prompts), "no planning call"
    assert not any("<evidence>" in p for p in prompts)
    offered = {t["name"] for r in fake_claude.requests for t in r["body"].get("tools", [])}
    assert not offered & {"web_search", "memory_search"}
    assert "planning" not in {item["stage"] for item in await stage_history(session)}


async def test_web_off_searches_only_the_knowledge_base(
    fake_claude: Any, fake_exa: Any, make_session: Any, alice: Any
):
    await sync_to_async(add_item)(owner=alice, title="Dreams", body="Why do we dream? REM.")
    session = await sync_to_async(make_session)(
        plan={}, web_enabled=False, question="Why do we dream?", budget_seconds=0.3
    )

    await run(session)

    await session.arefresh_from_db()
    assert fake_exa.searches == []
    assert session.plan.get("steps"), "research still plans"
    offered = {t["name"] for r in fake_claude.requests for t in r["body"].get("tools", [])}
    assert "memory_search" in offered and "web_search" not in offered
    assert any("off for this session" in note for note in session.research_notes), (
        session.research_notes
    )


async def test_a_pause_stops_the_model_stream_in_flight(
    fake_claude: Any, make_session: Any, background_tasks: None
):
    session = await sync_to_async(make_session)(budget_seconds=60, synthesis_interval_seconds=60)
    status, _ = await stopped_mid_stream(
        session,
        fake_claude,
        lambda: ThinkingSession.objects.get(pk=session.pk).pause(),
        after=1.5,
        timeout=10,  # well before the stream would end on its own
    )

    await session.arefresh_from_db()
    assert status == Status.PAUSED
    assert await session.thoughts.acount() == 0, "the unfinished step is discarded"
    assert session.cycles == 0
    assert session.active_seconds < 1.0, "the 1.5 s it streamed is not thinking time"
    assert session.worker_id == "" and session.running_since is None


async def test_a_cancel_stops_the_model_mid_tool_loop(
    fake_claude: Any, make_session: Any, background_tasks: None
):
    session = await sync_to_async(make_session)(budget_seconds=60, synthesis_interval_seconds=60)
    fake_claude.enqueue(
        Reply(tool_uses=[{"name": "think", "input": {"thought": "First, a note."}}]),
        Reply(text="THOUGHT: " + "slow " * 80, chunk_delay=2.0),  # the second round crawls
    )
    await claim(session)
    llm = LLM.from_settings()

    async def publish(event: SessionEvent) -> None:
        pass

    task = asyncio.create_task(
        loop.run_session(session.pk, llm=llm, publish=publish, worker_id=WORKER)
    )
    try:
        for _ in range(200):  # until the second round of the tool loop is streaming
            if len(fake_claude.requests) >= 2:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)
        await sync_to_async(lambda: ThinkingSession.objects.get(pk=session.pk).cancel())()
        status = await asyncio.wait_for(task, timeout=10)
    finally:
        task.cancel()
        await llm.close()

    await session.arefresh_from_db()
    assert status == Status.CANCELLED
    assert await session.thoughts.acount() == 0, "not even the tool loop's scratchpad note"
    assert await session.model_calls.acount() == 0
