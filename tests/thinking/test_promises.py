"""Promises of the deliberation loop that a refactor could break without any other test
noticing (issue 16). Each test runs whole sessions against the wire-level fake Claude and
asserts on what the provider received and on the stored rows, never on the loop's helpers,
so the loop can be reshaped freely while these keep guarding what a person relies on."""

from __future__ import annotations

import itertools
import json
import logging
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from fakes.anthropic_server import HttpError, Reply
from tests.helpers import (
    WORKER,
    FrozenClock,
    SetAfterThoughts,
    TakenOverWhen,
    claim,
    each_call_takes,
    prompt_of,
    run,
    set_fields,
    stage_history,
    take_over,
    without_tools,
)
from thinking.events import SessionEvent
from thinking.models import (
    CitationCheck,
    CompletionReason,
    ModelCall,
    Source,
    Status,
    SubQuestion,
    ThinkingSession,
)

pytestmark = pytest.mark.django_db(transaction=True)

THOUGHT = "THOUGHT: A thought on the focus.\nTYPE: insight\nCONFIDENCE: 0.7"


def first_prompt(request: dict) -> str:
    """The task of a request: inside a tool loop the last user turn holds tool results."""
    content = request["body"]["messages"][0]["content"]
    if isinstance(content, str):
        return content
    return "\n\n".join(block.get("text", "") for block in content if isinstance(block, dict))


def thought_requests(fake: Any) -> list[dict]:
    return [r for r in fake.requests if "THOUGHT:" in first_prompt(r)]


def plan_requests(fake: Any) -> list[dict]:
    return [r for r in fake.requests if "WEB QUERIES:" in first_prompt(r)]


def on_frozen_clock(fake: Any, seconds: float) -> FrozenClock:
    """Each model call moves the clock `seconds`, the model never calling a tool."""
    fake.responder = without_tools(fake)
    frozen = FrozenClock()
    each_call_takes(fake, frozen, seconds)
    return frozen


async def run_with_calls_of(fake: Any, session: ThinkingSession, seconds: float) -> None:
    """Run the session on a frozen clock that moves `seconds` with each model call, the model
    never calling a tool: the same steps on any machine."""
    await run(session, clock=on_frozen_clock(fake, seconds).clock)


async def new_session(make_session: Any, **fields: Any) -> ThinkingSession:
    fields.setdefault("budget_seconds", 0.2)
    fields.setdefault("synthesis_interval_seconds", 60)
    return await sync_to_async(make_session)(**fields)


# 1. The tool loop's assistant turn goes back with its thinking blocks and signatures.


async def test_the_tool_loop_sends_the_models_thinking_back_with_its_signature(
    fake_claude: Any, make_session: Any
):
    session = await new_session(
        make_session, thinking_mode="manual", thinking_budget=2048, max_tokens=4096
    )
    fake_claude.enqueue(
        Reply(
            thinking="I need evidence before I write thoughts.",
            redacted=True,
            tool_uses=[{"name": "memory_search", "input": {"query": "consciousness notes"}}],
        ),
        Reply(text=THOUGHT),
    )
    fake_claude.responder = without_tools(fake_claude)

    status = await run(session)

    assert status == Status.COMPLETED
    first, second = fake_claude.requests[0]["body"], fake_claude.requests[1]["body"]
    assert first["thinking"]["type"] == "enabled" and second["thinking"] == first["thinking"]
    assistant = second["messages"][1]
    assert assistant["role"] == "assistant"
    # The API rejects a tool loop whose assistant turn lost its thinking: it must come back
    # exactly as streamed, in order, with the signature and the opaque redacted block.
    assert [block["type"] for block in assistant["content"]] == [
        "redacted_thinking",
        "thinking",
        "tool_use",
    ]
    thinking = assistant["content"][1]
    assert thinking["thinking"] == "I need evidence before I write thoughts."
    assert thinking["signature"].startswith("sig-")
    assert assistant["content"][0]["data"].startswith("redacted-")
    assert second["messages"][2]["content"][0]["type"] == "tool_result"


# 2. The think tool is offered only when both switches allow it (and tools are on at all).


@pytest.mark.parametrize(
    ("tools_setting", "tools_enabled", "think_setting", "think_tool", "expected"),
    [
        (True, True, True, True, ["memory_search", "progress", "think"]),
        (True, True, True, False, ["memory_search", "progress"]),
        (True, True, False, True, ["memory_search", "progress"]),
        (True, False, True, True, None),
        (False, True, True, True, None),
    ],
    ids=["all-on", "session-no-think", "server-no-think", "session-no-tools", "server-no-tools"],
)
async def test_the_think_tool_is_offered_only_when_the_switches_allow_it(
    fake_claude: Any,
    make_session: Any,
    settings: Any,
    tools_setting: bool,
    tools_enabled: bool,
    think_setting: bool,
    think_tool: bool,
    expected: list[str] | None,
):
    settings.DEEPTHINK_TOOLS = tools_setting
    settings.DEEPTHINK_THINK_TOOL = think_setting
    session = await new_session(make_session, tools_enabled=tools_enabled, think_tool=think_tool)
    fake_claude.responder = without_tools(fake_claude)

    await run(session)

    requests = thought_requests(fake_claude)
    assert requests
    for request in requests:
        offered = [tool["name"] for tool in request["body"].get("tools", [])] or None
        assert offered == expected
        # The prompt's think-tool guidance goes with the tool, never without it.
        guided = "Using the think tool" in first_prompt(request)
        assert guided == (expected is not None and "think" in expected)
        # Without it, the task's paragraph runs straight into the reply format.
        after_task = first_prompt(request).split("cite it as [n].", 1)[1]
        assert after_task.startswith("\n\n## Using the think tool" if guided else "\n\nFormat")


async def test_with_web_research_on_the_model_may_search_the_web(
    fake_claude: Any, fake_exa: Any, make_session: Any
):
    session = await new_session(make_session)
    fake_claude.responder = without_tools(fake_claude)

    await run(session)

    offered = {tool["name"] for tool in thought_requests(fake_claude)[0]["body"]["tools"]}
    assert offered == {"web_search", "memory_search", "progress", "think"}


# 3. A high-priority sub-question that becomes the focus gets its own research.


async def test_a_high_priority_focus_is_researched_before_it_is_thought_about(
    fake_claude: Any, make_session: Any, settings: Any
):
    settings.DEEPTHINK_QUESTIONS_EVERY = 1000  # no new sub-questions to research as well
    session = await new_session(
        make_session, plan={"steps": ["Read", "Compare", "Conclude"], "current": 0}
    )
    urgent = await SubQuestion.objects.acreate(
        session=session, text="Is attention the same as awareness?", priority=9
    )
    fake_claude.responder = without_tools(fake_claude)

    await run(session)

    plans = plan_requests(fake_claude)
    assert len(plans) == 1
    assert "Focus on this sub-question now: Is attention the same as awareness?" in (
        first_prompt(plans[0])
    )
    assert "What is consciousness?" in first_prompt(plans[0])  # the session's own question
    # The research came before the thoughts on that focus.
    order = fake_claude.requests.index(plans[0])
    first_thoughts = fake_claude.requests.index(thought_requests(fake_claude)[0])
    assert order < first_thoughts
    await session.arefresh_from_db()
    assert session.plan["researched"] == [urgent.pk]
    assert session.plan["steps"] == ["Read", "Compare", "Conclude"], "the main plan is kept"
    # The stage history says what was being planned for.
    planning = [s["message"] for s in await stage_history(session) if s["stage"] == "planning"]
    assert planning == [
        "Planning research for the sub-question: Is attention the same as awareness?"
    ]


async def test_a_focus_of_exactly_the_threshold_priority_is_researched(
    fake_claude: Any, make_session: Any, settings: Any
):
    settings.DEEPTHINK_QUESTIONS_EVERY = 1000
    settings.DEEPTHINK_REPLAN_PRIORITY = 7
    session = await new_session(make_session)
    await SubQuestion.objects.acreate(session=session, text="Do plants feel?", priority=7)
    fake_claude.responder = without_tools(fake_claude)

    await run(session)

    assert len(plan_requests(fake_claude)) == 1


async def test_a_focus_whose_planning_call_fails_is_still_searched_for(
    fake_claude: Any, fake_exa: Any, make_session: Any, settings: Any
):
    settings.DEEPTHINK_QUESTIONS_EVERY = 1000  # no new sub-questions to research as well
    session = await new_session(make_session, plan={"steps": ["Read"], "current": 0})
    await SubQuestion.objects.acreate(
        session=session, text="Is attention the same as awareness?", priority=9
    )

    def no_focus_plan(body: dict) -> Any:
        if "WEB QUERIES:" in first_prompt({"body": body}):
            return HttpError(status=400, type="invalid_request_error", message="no plan")
        return fake_claude.scripted_mind({**body, "tools": []})

    fake_claude.responder = no_focus_plan
    await run(session)

    # The simple plan is made from the focus, not from the session's question.
    searched = [r.body["query"] for r in fake_exa.searches]
    assert "Is attention the same as awareness?" in searched
    assert "What is consciousness?" not in searched


async def test_a_low_priority_focus_is_not_researched_again(
    fake_claude: Any, make_session: Any, settings: Any
):
    settings.DEEPTHINK_QUESTIONS_EVERY = 1000  # no new high-priority sub-questions
    session = await new_session(make_session)
    await SubQuestion.objects.acreate(session=session, text="A side question?", priority=3)
    fake_claude.responder = without_tools(fake_claude)

    await run(session)

    assert plan_requests(fake_claude) == []


async def test_only_so_many_sub_questions_get_their_own_research(
    fake_claude: Any, make_session: Any, settings: Any
):
    settings.DEEPTHINK_QUESTIONS_EVERY = 1000
    settings.DEEPTHINK_REPLANS = 2
    session = await new_session(make_session, budget_seconds=2.0)
    for text in ("Is attention awareness?", "Do plants feel?", "Can machines dream?"):
        await SubQuestion.objects.acreate(session=session, text=text, priority=9)

    await run_with_calls_of(fake_claude, session, 0.1)

    await session.arefresh_from_db()
    assert await session.sub_questions.filter(explored=True).acount() == 3  # each had a turn
    assert len(plan_requests(fake_claude)) == 2 and len(session.plan["researched"]) == 2


# 4. The plan step the model reports moves the plan's current step on the page.


async def test_the_plan_step_the_model_reports_becomes_the_current_step(
    fake_claude: Any, make_session: Any
):
    steps = ["Define terms", "Gather evidence", "Test theories", "Conclude"]
    session = await new_session(make_session, plan={"steps": steps, "current": 0})
    report = {"stage": "analysis", "message": "Testing theories.", "plan_step": 3}
    fake_claude.enqueue(
        Reply(text="Reporting.", tool_uses=[{"name": "progress", "input": report}]),
        Reply(text=THOUGHT),
    )
    fake_claude.responder = without_tools(fake_claude)

    await run(session)

    await session.arefresh_from_db()
    assert session.plan["current"] == 2  # step 3 of 4, counted from 0
    assert session.plan["steps"] == steps
    # The report is in the stage history (the loop's own stages came after it).
    assert any(s["by"] == "model" and s.get("plan_step") == 3 for s in await stage_history(session))


async def test_a_plan_step_past_the_end_stops_at_the_last_step(fake_claude: Any, make_session: Any):
    session = await new_session(make_session, plan={"steps": ["One", "Two"], "current": 0})
    report = {"stage": "synthesis", "message": "Wrapping up.", "plan_step": 9}
    fake_claude.enqueue(
        Reply(text="Reporting.", tool_uses=[{"name": "progress", "input": report}]),
        Reply(text=THOUGHT),
    )
    fake_claude.responder = without_tools(fake_claude)

    await run(session)

    await session.arefresh_from_db()
    assert session.plan["current"] == 1


# 5. Effort is sent whether or not thinking is on.


@pytest.mark.parametrize("mode", ["off", "adaptive"])
async def test_effort_is_sent_whether_or_not_thinking_is_on(
    fake_claude: Any, make_session: Any, mode: str, settings: Any
):
    # claude-opus-5-5 takes every effort level; its default is medium. Utility calls (plan,
    # sub-questions, re-ranking, checks) go to the fast model without thinking: the promise is
    # about the session's own model.
    settings.DEEPTHINK_FAST_MODEL = "claude-haiku-5-5"
    session = await new_session(
        make_session, model_id="claude-opus-5-5", thinking_mode=mode, effort="low"
    )
    fake_claude.responder = without_tools(fake_claude)

    status = await run(session)

    assert status == Status.COMPLETED
    bodies = [r["body"] for r in fake_claude.requests if r["body"]["model"] == "claude-opus-5-5"]
    assert bodies
    assert all(body.get("output_config") == {"effort": "low"} for body in bodies)
    assert all(("thinking" in body) == (mode != "off") for body in bodies)


# 6. A failed planning call falls back to a simple plan and the session goes on.


async def test_a_failed_planning_call_falls_back_to_a_simple_plan(
    fake_claude: Any, make_session: Any
):
    session = await new_session(make_session, plan={}, question="Why do cats purr?")
    fake_claude.enqueue(HttpError(status=400, type="invalid_request_error", message="no plan"))
    fake_claude.responder = without_tools(fake_claude)

    status = await run(session)

    await session.arefresh_from_db()
    assert status == Status.COMPLETED
    assert session.plan["source"] == "heuristic"
    assert session.plan["steps"] and session.plan["web_queries"][0] == "Why do cats purr?"
    assert any("Planning with the model failed" in note for note in session.research_notes)
    assert await session.thoughts.aexists() and session.final_answer
    # The session's first plan is for the whole question, not for a sub-question.
    planned = plan_requests(fake_claude)[0]
    assert "Why do cats purr?" in first_prompt(planned)
    assert "Focus on this sub-question" not in first_prompt(planned)


async def test_a_planning_call_refused_for_its_key_fails_the_session_instead(
    fake_claude: Any, make_session: Any
):
    # No simple plan to think on: without a working key no later call would work either.
    session = await new_session(make_session, plan={})
    fake_claude.enqueue(HttpError(status=401, type="authentication_error", message="bad key"))

    status = await run(session)

    await session.arefresh_from_db()
    assert status == Status.FAILED
    assert "refused the API key" in session.error_message
    assert session.plan == {} and len(fake_claude.requests) == 1


async def test_a_plan_is_not_stored_once_another_worker_took_the_session(
    fake_claude: Any, make_session: Any
):
    session = await new_session(make_session, plan={}, budget_seconds=60)

    def taken_over_while_planning(body: dict) -> Any:
        take_over(session.pk)  # another worker claims it while the plan is being written
        return fake_claude.scripted_mind({**body, "tools": []})

    fake_claude.responder = taken_over_while_planning
    status = await run(session)

    await session.arefresh_from_db()
    assert status is None and session.plan == {}
    assert len(fake_claude.requests) == 1


# 7. Periodic syntheses come at the interval, not every cycle.


async def test_no_periodic_synthesis_before_the_interval_has_passed(
    fake_claude: Any, make_session: Any
):
    session = await new_session(make_session, budget_seconds=0.5, synthesis_interval_seconds=60)
    fake_claude.delay = 0.02
    fake_claude.responder = without_tools(fake_claude)

    await run(session)

    assert await session.thoughts.values("cycle").distinct().acount() >= 2
    syntheses = [s async for s in session.syntheses.all()]
    assert [s.is_final for s in syntheses] == [True]
    assert not any("SYNTHESIS:" in first_prompt(r) for r in fake_claude.requests)


async def test_periodic_syntheses_are_an_interval_of_thinking_apart(
    fake_claude: Any, make_session: Any
):
    interval = 0.5
    session = await new_session(
        make_session, budget_seconds=1.8, synthesis_interval_seconds=interval
    )
    fake_claude.delay = 0.02
    fake_claude.responder = without_tools(fake_claude)

    await run(session)

    periodic = [
        s.time_offset_seconds
        async for s in session.syntheses.filter(is_final=False).order_by("sequence")
    ]
    assert periodic, "a synthesis once the interval has passed"
    # Offsets are active time rounded to 1/100 s.
    assert periodic[0] >= interval - 0.01
    assert all(b - a >= interval - 0.01 for a, b in itertools.pairwise(periodic))
    cycles = await session.thoughts.values("cycle").distinct().acount()
    assert cycles > len(periodic)


async def test_a_synthesis_comes_as_soon_as_the_interval_has_passed(
    fake_claude: Any, make_session: Any, settings: Any
):
    settings.DEEPTHINK_QUESTIONS_EVERY = 100
    session = await new_session(make_session, budget_seconds=2.0, synthesis_interval_seconds=1.0)
    await run_with_calls_of(fake_claude, session, 0.5)  # two cycles are exactly the interval

    requests = [json.dumps(r["body"]) for r in fake_claude.requests]
    synthesis_at = next(i for i, body in enumerate(requests) if "Now synthesize" in body)
    assert synthesis_at == 2  # after the second thought cycle (a call each), not the third
    first = await session.syntheses.filter(is_final=False).order_by("sequence").afirst()
    assert first is not None and first.time_offset_seconds == 1.0


async def test_the_final_answers_own_time_counts_as_thinking_time(
    fake_claude: Any, make_session: Any, settings: Any
):
    settings.DEEPTHINK_QUESTIONS_EVERY = 100
    session = await new_session(make_session, budget_seconds=1.0, synthesis_interval_seconds=60)
    await run_with_calls_of(fake_claude, session, 0.5)  # two thought cycles, then the final

    await session.arefresh_from_db()
    assert len(fake_claude.requests) == 3 and "ANSWER:" in first_prompt(fake_claude.requests[2])
    assert session.status == Status.COMPLETED and session.active_seconds == 1.5


# 8. The final answer is written from every synthesis along the way.


async def test_the_final_prompt_carries_every_synthesis(fake_claude: Any, make_session: Any):
    session = await new_session(make_session, budget_seconds=1.2, synthesis_interval_seconds=0.3)
    fake_claude.delay = 0.02
    fake_claude.responder = without_tools(fake_claude)

    await run(session)

    texts = [s.text async for s in session.syntheses.filter(is_final=False).order_by("sequence")]
    assert texts, "the session synthesised along the way"
    finals = [r for r in fake_claude.requests if "ANSWER:" in first_prompt(r)]
    assert len(finals) == 1
    final_prompt = prompt_of(finals[0])
    for text in texts:
        assert text in final_prompt


# 9. Sub-questions are asked for from the question, a follow-up's background and the log,
#    and stored only by the worker that holds the session.


def question_requests(fake: Any) -> list[dict]:
    return [r for r in fake.requests if "QUESTION: [question text]" in first_prompt(r)]


async def test_the_thought_call_reads_the_question_its_background_and_the_sources_known(
    fake_claude: Any, make_session: Any
):
    session = await new_session(
        make_session, question="Why do cats purr?", parent_context="Cats purr at 25 Hz."
    )
    for number in (1, 2):
        await Source.objects.acreate(
            session=session, number=number, kind="web", title=f"Page {number}", key=f"k{number}"
        )
    fake_claude.responder = without_tools(fake_claude)

    await run(session)

    asked = first_prompt(thought_requests(fake_claude)[0])
    assert "Question: Why do cats purr?" in asked
    assert "<earlier_session>\nCats purr at 25 Hz.\n</earlier_session>" in asked
    assert "Current focus: Why do cats purr?\nSources found so far: 2." in asked


async def test_the_sub_question_call_reads_the_question_its_background_and_the_log(
    fake_claude: Any, make_session: Any, settings: Any
):
    settings.DEEPTHINK_QUESTIONS_EVERY = 1
    session = await new_session(
        make_session, question="Why do cats purr?", parent_context="Cats purr at 25 Hz."
    )
    fake_claude.enqueue(Reply(text="THOUGHT: Purring may aid bone healing.\nTYPE: insight"))
    fake_claude.responder = without_tools(fake_claude)

    await run(session)

    asked = first_prompt(question_requests(fake_claude)[0])
    assert "Original Question: Why do cats purr?" in asked
    assert "<earlier_session>\nCats purr at 25 Hz.\n</earlier_session>" in asked
    assert "Purring may aid bone healing." in asked  # the thought just stored, in the log


async def test_sub_questions_are_asked_for_every_few_thoughts_not_every_cycle(
    fake_claude: Any, make_session: Any, settings: Any
):
    settings.DEEPTHINK_QUESTIONS_EVERY = 2
    session = await new_session(make_session, budget_seconds=3.0)
    frozen = FrozenClock()

    def one_thought_a_cycle(body: dict) -> Any:
        task = first_prompt({"body": body})
        if "QUESTION: [question text]" in task:
            return Reply(text="QUESTION: Is purring voluntary?\nPRIORITY: 5\nWHY: Control")
        if "ANSWER:" in task:
            return fake_claude.scripted_mind({**body, "tools": []})
        frozen.advance(0.5)  # six cycles in the budget
        return Reply(text=THOUGHT)

    fake_claude.responder = one_thought_a_cycle
    await run(session, clock=frozen.clock)

    assert await session.thoughts.acount() == 6
    assert len(question_requests(fake_claude)) == 3  # after thoughts 2, 4 and 6


async def test_sub_questions_are_not_stored_once_another_worker_took_the_session(
    fake_claude: Any, make_session: Any, settings: Any
):
    settings.DEEPTHINK_QUESTIONS_EVERY = 1
    session = await new_session(make_session, budget_seconds=60)

    def taken_over_while_asking(body: dict) -> Any:
        if "QUESTION: [question text]" in first_prompt({"body": body}):
            take_over(session.pk)  # another worker claims it while this call runs
            return Reply(text="QUESTION: Is purring voluntary?\nPRIORITY: 5\nWHY: Control")
        return fake_claude.scripted_mind({**body, "tools": []})

    fake_claude.responder = taken_over_while_asking
    status = await run(session)

    assert status is None  # it stopped: the session is the other worker's now
    assert not await SubQuestion.objects.filter(session=session).aexists()


async def test_a_synthesis_answered_after_another_worker_took_the_session_is_not_stored(
    fake_claude: Any, make_session: Any, settings: Any
):
    settings.DEEPTHINK_QUESTIONS_EVERY = 100
    session = await new_session(make_session, budget_seconds=60, synthesis_interval_seconds=0.01)
    fake_claude.delay = 0.02  # the first cycle's thinking makes a synthesis due

    def taken_over_while_synthesising(body: dict) -> Any:
        if "Now synthesize" in json.dumps(body):
            take_over(session.pk)  # another worker claims it while this call runs
        return fake_claude.scripted_mind({**body, "tools": []})

    fake_claude.responder = taken_over_while_synthesising
    status = await run(session)

    assert status is None  # it stopped: the session is the other worker's now
    assert any("Now synthesize" in json.dumps(r["body"]) for r in fake_claude.requests)
    assert not await session.syntheses.aexists()


async def test_the_synthesis_call_reads_the_question_its_background_and_the_log(
    fake_claude: Any, make_session: Any
):
    session = await new_session(
        make_session, question="Why do cats purr?", parent_context="Cats purr at 25 Hz.",
        budget_seconds=1.0, synthesis_interval_seconds=0.1,  # a synthesis even on a busy machine
    )  # fmt: skip
    fake_claude.enqueue(Reply(text="THOUGHT: Purring may aid bone healing.\nTYPE: insight"))
    fake_claude.responder = without_tools(fake_claude)

    await run(session)

    synthesis = next(
        first_prompt(r)
        for r in fake_claude.requests
        if "Now synthesize your current understanding" in json.dumps(r["body"]["messages"][0])
    )
    assert "Original Question: Why do cats purr?" in synthesis
    assert "<earlier_session>\nCats purr at 25 Hz.\n</earlier_session>" in synthesis
    assert "Purring may aid bone healing." in synthesis
    purposes = {p async for p in session.model_calls.values_list("purpose", flat=True)}
    assert {"synthesis", "final"} <= purposes


# 10. A worker that lost the session writes nothing more: not the sources its searches
#     found, not a synthesis, not the final answer (the other worker's session is its own).


async def stage_names(session: ThinkingSession) -> list[str]:
    return [item["stage"] for item in await stage_history(session)]


async def test_sources_found_after_another_worker_took_the_session_are_not_stored(
    fake_claude: Any, fake_exa: Any, make_session: Any
):
    session = await new_session(make_session, plan={}, budget_seconds=60)
    fake_claude.responder = without_tools(fake_claude)
    fake_exa.on_search = lambda body: take_over(session.pk)  # while the web search runs

    status = await run(session)

    await session.arefresh_from_db()
    assert status is None and fake_exa.searches  # it searched, then stopped
    assert not await session.sources.filter(kind="web").aexists()
    assert session.worker_id == "another-worker" and "research" in await stage_names(session)


async def test_a_step_whose_tool_call_failed_ends_only_once_its_other_calls_are_done(
    fake_claude: Any, fake_exa: Any, make_session: Any
):
    # Two tool calls in one turn: the progress report fails at once (the session is another
    # worker's now), the web search takes a while. Nothing may run on after the step ends.
    session = await new_session(make_session, budget_seconds=60)
    fake_exa.delay = 0.5
    uses = [
        {"name": "progress", "input": {"stage": "research", "message": "Searching."}},
        {"name": "web_search", "input": {"query": "purring frequency"}},
    ]

    def taken_over_with_two_tool_calls(body: dict) -> Any:
        take_over(session.pk)
        return Reply(tool_uses=uses)

    fake_claude.responder = taken_over_with_two_tool_calls
    status = await run(session)

    assert status is None and len(fake_exa.searches) == 1
    assert fake_exa.in_flight == 0  # the search had finished when the step ended
    assert not await session.sources.aexists()


async def test_no_synthesis_is_begun_once_another_worker_took_the_session(
    fake_claude: Any, make_session: Any, settings: Any
):
    settings.DEEPTHINK_QUESTIONS_EVERY = 100
    session = await new_session(make_session, budget_seconds=60, synthesis_interval_seconds=0.01)
    fake_claude.delay = 0.02  # the first cycle's thinking makes a synthesis due
    thoughts = without_tools(fake_claude)

    def taken_over_while_thinking(body: dict) -> Any:
        # The store of these thoughts is the step that would enter the synthesis due after
        # them (issue 17: a synthesis's start has no hop of its own), so it is where the
        # lease is checked before the synthesis is begun.
        if "Now synthesize" not in json.dumps(body):
            take_over(session.pk)  # another worker claims it while this cycle's call runs
        return thoughts(body)

    fake_claude.responder = taken_over_while_thinking

    status = await run(session)

    await session.arefresh_from_db()
    assert status is None and session.worker_id == "another-worker"
    assert not await session.thoughts.aexists()  # the cycle's store was refused
    assert "synthesis" not in await stage_names(session)
    assert not any("Now synthesize" in json.dumps(r["body"]) for r in fake_claude.requests)
    assert not await session.syntheses.aexists()


async def test_a_synthesis_begun_as_another_worker_takes_the_session_stores_nothing(
    fake_claude: Any, make_session: Any, settings: Any
):
    """Taken over the moment the thoughts before a synthesis are stored (their store entered
    the synthesis's stage while this worker held the lease, issue 17): the synthesis's one
    call may be begun, and nothing of it is stored; the session is the other worker's."""
    settings.DEEPTHINK_QUESTIONS_EVERY = 100
    session = await new_session(make_session, budget_seconds=60, synthesis_interval_seconds=0.01)
    fake_claude.delay = 0.02  # the first cycle's thinking makes a synthesis due
    fake_claude.responder = without_tools(fake_claude)
    events = TakenOverWhen(session.pk, lambda event: bool(event.thoughts))

    status = await run(session, events)

    await session.arefresh_from_db()
    assert status is None and events.taken and session.worker_id == "another-worker"
    begun = [r for r in fake_claude.requests if "Now synthesize" in json.dumps(r["body"])]
    assert len(begun) <= 1
    assert not await session.syntheses.aexists()
    assert not [e for e in events if e.synthesis is not None]


async def test_no_final_answer_is_begun_once_another_worker_took_the_session(
    fake_claude: Any, make_session: Any, settings: Any
):
    settings.DEEPTHINK_QUESTIONS_EVERY = 100
    session = await new_session(make_session, budget_seconds=0.01)
    fake_claude.delay = 0.02  # the first cycle uses up the budget: the final answer is next
    fake_claude.responder = without_tools(fake_claude)
    events = TakenOverWhen(session.pk, lambda event: bool(event.thoughts))

    status = await run(session, events)

    await session.arefresh_from_db()
    assert status is None and events.taken and await session.thoughts.aexists()
    assert not {"reflection", "synthesis"} & set(await stage_names(session))
    assert not any("ANSWER:" in first_prompt(r) for r in fake_claude.requests)
    assert session.final_answer == "" and not await session.syntheses.aexists()


# 10. Every synthesis has its citations checked, by the worker that holds the session; a
#     pause, cancel or stop seen around a synthesis keeps what a person was promised.

CHECK = "VERDICT: supported | partial | unsupported"  # the citation checker's format


async def cited_session(make_session: Any, **fields: Any) -> ThinkingSession:
    """Planned, with two sources found: the scripted model cites them in its syntheses."""

    found = (
        ("web", "Reef", "Coral bleaching begins when water stays above 30 degrees for weeks."),
        ("memory", "Tides", "Tides are caused mainly by the pull of the moon on the oceans."),
    )

    def make() -> ThinkingSession:
        session = make_session(**fields)
        for number, (kind, title, snippet) in enumerate(found, start=1):
            Source.objects.create(
                session=session, number=number, kind=kind, title=title, snippet=snippet, key=title
            )
        return session

    return await sync_to_async(make)()


def check_rows(session: ThinkingSession) -> list[tuple[int, bool, int]]:
    """Each synthesis in order: its sequence, whether final, how many verdicts it has."""
    from django.db.models import Count

    rows = session.syntheses.order_by("sequence").annotate(n=Count("citation_checks"))
    return [(s.sequence, s.is_final, s.n) for s in rows]


async def test_each_synthesis_has_its_citations_checked_and_open_pages_hear_of_it(
    fake_claude: Any, make_session: Any, settings: Any, caplog: Any
):
    settings.DEEPTHINK_QUESTIONS_EVERY = 100
    session = await cited_session(make_session, budget_seconds=2.0, synthesis_interval_seconds=1.0)
    frozen = on_frozen_clock(fake_claude, 0.5)
    events: list[SessionEvent] = []

    with caplog.at_level(logging.WARNING, logger="thinking"):
        status = await run(session, events, clock=frozen.clock)

    assert status == Status.COMPLETED
    assert caplog.records == [], "a check that goes well logs nothing"
    rows = await sync_to_async(check_rows)(session)
    assert [final for _, final, _ in rows].count(False) >= 1, "a periodic synthesis"
    assert all(n > 0 for _, _, n in rows), rows  # the periodic ones and the final answer
    # Each synthesis's marks reach the open pages once its verdicts are stored.
    assert [e.checked for e in events if e.checked is not None] == [seq for seq, _, _ in rows]


async def test_a_periodic_synthesis_is_not_checked_once_another_worker_took_the_session(
    fake_claude: Any, make_session: Any, settings: Any
):
    settings.DEEPTHINK_QUESTIONS_EVERY = 100
    session = await cited_session(make_session, budget_seconds=2.0, synthesis_interval_seconds=1.0)
    frozen = on_frozen_clock(fake_claude, 0.5)
    # Taken over as soon as the periodic synthesis is stored, while its check is asked for.
    events = TakenOverWhen(session.pk, lambda event: event.synthesis is not None)

    status = await run(session, events, clock=frozen.clock)

    assert status is None and events.taken
    assert await session.syntheses.filter(is_final=False).aexists()
    assert not await CitationCheck.objects.filter(synthesis__session=session).aexists()
    assert not await ModelCall.objects.filter(session=session, purpose="check").aexists()
    assert not any(e.checked is not None for e in events)


async def test_a_pause_right_after_a_citation_check_keeps_the_checks_time(
    fake_claude: Any, make_session: Any, settings: Any
):
    settings.DEEPTHINK_QUESTIONS_EVERY = 100
    session = await cited_session(make_session, budget_seconds=30, synthesis_interval_seconds=0.5)
    frozen = on_frozen_clock(fake_claude, 0.5)
    respond = fake_claude.responder

    def pause_while_checking(body: dict) -> Any:
        if CHECK in json.dumps(body):  # a person pauses while the checker is asked
            set_fields(status=Status.PAUSED)(session.pk)
        return respond(body)

    fake_claude.responder = pause_while_checking
    events: list[SessionEvent] = []
    status = await run(session, events, clock=frozen.clock)

    await session.arefresh_from_db()
    assert status == Status.PAUSED and not events[-1].finished
    # A thought cycle, the synthesis and its check: three calls of half a second.
    assert [r[1] for r in await sync_to_async(check_rows)(session)] == [False]
    assert len(fake_claude.requests) == 3
    assert session.active_seconds == 1.5


async def test_a_cancel_seen_between_two_steps_reaches_open_pages_as_finished(
    fake_claude: Any, make_session: Any, settings: Any
):
    settings.DEEPTHINK_QUESTIONS_EVERY = 100
    session = await new_session(make_session, budget_seconds=30)
    fake_claude.responder = without_tools(fake_claude)
    # A person cancels once the first thoughts are stored, before the next step begins.
    events = SetAfterThoughts(session.pk, fake_claude, Status.CANCELLED)

    status = await run(session, events)

    await session.arefresh_from_db()
    assert status == Status.CANCELLED and events.taken
    assert events[-1] == SessionEvent(session.pk, finished=True)
    assert await session.thoughts.aexists(), "what was stored before the cancel stays"
    assert session.worker_id == "" and session.running_since is None
    # The next cycle's start saw the cancel: no other call was made, no stage entered.
    assert len(fake_claude.requests) == events.asked
    cycles = {cycle async for cycle in session.thoughts.values_list("cycle", flat=True)}
    assert cycles == {0}, cycles
    assert await session.model_calls.filter(purpose="thoughts").acount() == 1
    entered = [s["stage"] for s in await stage_history(session)]
    assert entered.count("analysis") == 1, entered


async def test_a_stop_asked_for_during_a_periodic_synthesis_still_gets_the_final_answer(
    fake_claude: Any, make_session: Any, settings: Any
):
    settings.DEEPTHINK_QUESTIONS_EVERY = 100
    settings.DEEPTHINK_CITATION_CHECK = False
    session = await new_session(make_session, budget_seconds=30, synthesis_interval_seconds=0.5)
    frozen = on_frozen_clock(fake_claude, 0.5)
    respond = fake_claude.responder

    def stop_while_synthesising(body: dict) -> Any:
        if "Now synthesize" in json.dumps(body):  # a person asks to wrap up meanwhile
            set_fields(stop_requested=True)(session.pk)
        return respond(body)

    fake_claude.responder = stop_while_synthesising
    status = await run(session, clock=frozen.clock)

    await session.arefresh_from_db()
    assert status == Status.COMPLETED
    assert session.completion_reason == CompletionReason.STOP_SIGNAL
    assert [r[1] for r in await sync_to_async(check_rows)(session)] == [False, True]
    assert session.final_answer and "ANSWER:" in first_prompt(fake_claude.requests[-1])
    assert await session.thoughts.values("cycle").distinct().acount() == 1


async def test_a_session_taken_over_before_its_worker_began_it_is_left_alone(
    fake_claude: Any, make_session: Any, caplog: Any
):
    from thinking.deliberation import loop
    from thinking.provider.llm import LLM

    session = await new_session(make_session, budget_seconds=30)
    await claim(session)
    # Another worker's claim lands between this worker's claim and its start.
    await sync_to_async(take_over)(session.pk)
    events: list[SessionEvent] = []

    async def publish(event: SessionEvent) -> None:
        events.append(event)

    llm = LLM.from_settings()
    try:
        with caplog.at_level(logging.WARNING, logger="thinking"):
            status = await loop.run_session(session.pk, llm=llm, publish=publish, worker_id=WORKER)
    finally:
        await llm.close()

    before = session.status
    await session.arefresh_from_db()
    assert status is None and events == [] and fake_claude.requests == []
    assert session.status == before and session.started_at is None
    assert session.worker_id == "another-worker"
    assert caplog.records == []
