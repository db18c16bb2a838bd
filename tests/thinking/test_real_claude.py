"""Issue 13 through the loop: thinking blocks in tool loops, cut-off replies, model roles,
dollar ceilings and team reservations, against the strict fake Claude."""

from __future__ import annotations

import itertools
import json
from decimal import Decimal
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import transaction
from django.db.models import Sum
from django.urls import reverse

from accounts.models import Team
from fakes.anthropic_server import Reply, model_info
from tests.helpers import run
from thinking.models import CompletionReason, ModelCall, Status, ThinkingSession
from thinking.people import budget, limits
from thinking.provider import llm
from thinking.web.forms import StartSessionForm

pytestmark = pytest.mark.django_db(transaction=True)


def _thought_call(body: dict) -> bool:
    return "Now write your thoughts" in json.dumps(body["messages"][0])


async def test_thinking_blocks_go_back_unchanged_through_the_tool_loop(
    fake_claude: Any, make_session: Any
):
    """The fake refuses a tool loop whose thinking blocks were dropped or altered (400,
    not retried), so this session completes only if the loop echoes them exactly."""
    session = await sync_to_async(make_session)(
        budget_seconds=600, synthesis_interval_seconds=600, token_ceiling=6000,
        thinking_mode="adaptive",
    )  # fmt: skip
    used = False

    def think_first(body: dict) -> Reply:
        nonlocal used
        if _thought_call(body) and not used and len(body["messages"]) == 1:
            used = True
            note = {"name": "think", "input": {"thought": "Check the sources first."}}
            return Reply(thinking="I want a scratchpad note first.", tool_uses=[note])
        return fake_claude.scripted_mind(body)

    fake_claude.responder = think_first
    status = await run(session)

    await session.arefresh_from_db()
    assert status == Status.COMPLETED, session.error_message
    second = next(
        r["body"] for r in fake_claude.requests if len(r["body"]["messages"]) == 3
    )  # the tool loop's second round
    echoed = second["messages"][1]["content"][0]
    assert echoed["type"] == "thinking" and echoed["thinking"] == "I want a scratchpad note first."
    assert echoed["signature"].startswith("sig-")
    # The call's record keeps the assistant turn as streamed, for inspection on the server.
    kept = [c.content async for c in ModelCall.objects.filter(session=session, purpose="thoughts")]
    assert [echoed, second["messages"][1]["content"][1]] in [blocks[:2] for blocks in kept]


async def test_a_cut_off_cycle_is_retried_then_kept_as_truncated(
    fake_claude: Any, make_session: Any, client: Any, alice: Any
):
    session = await sync_to_async(make_session)(
        budget_seconds=600, synthesis_interval_seconds=600, token_ceiling=2500, tools_enabled=False
    )
    cut = "THOUGHT: A thought that survives.\nTYPE: insight\nCONFIDENCE: 0.7\n---\nTHOUGHT: half"
    answered = 0

    def cut_thoughts(body: dict) -> Reply:
        nonlocal answered
        if _thought_call(body) and answered < 2:
            answered += 1
            return Reply(text=cut, stop_reason="max_tokens")
        return fake_claude.scripted_mind(body)

    fake_claude.responder = cut_thoughts
    await run(session)

    await session.arefresh_from_db()
    assert session.truncated_replies == 1
    thoughts = [t async for t in session.thoughts.filter(cycle=0, type="insight")]
    assert thoughts and all(t.truncated for t in thoughts)
    assert "A thought that survives" in thoughts[0].text
    stops = [c.stop_reason async for c in ModelCall.objects.filter(session=session)]
    assert stops.count("max_tokens") == 2  # the first attempt and its retry are both on record
    sent = [r["body"]["max_tokens"] for r in fake_claude.requests if _thought_call(r["body"])]
    assert sent[1] == 2 * sent[0]
    await sync_to_async(client.force_login)(alice)
    detail = await sync_to_async(client.get)(f"/api/sessions/{session.pk}")
    assert detail.json()["usage"]["truncated_replies"] == 1


async def test_utility_calls_go_to_the_fast_model_without_thinking(
    fake_claude: Any, make_session: Any, settings: Any
):
    settings.DEEPTHINK_FAST_MODEL = "claude-haiku-5-5"
    settings.DEEPTHINK_QUESTIONS_EVERY = 1
    session = await sync_to_async(make_session)(
        plan={}, model_id="claude-opus-5-5", thinking_mode="adaptive", token_ceiling=5000,
        budget_seconds=600, synthesis_interval_seconds=600,
    )  # fmt: skip
    await run(session)

    bodies = [r["body"] for r in fake_claude.requests]
    # Told apart by their prompts (every call's system prompt names the format's labels).
    asked = [json.dumps(b["messages"]) for b in bodies]
    utility = [
        b for b, m in zip(bodies, asked, strict=True) if "WEB QUERIES:" in m or "QUESTION:" in m
    ]
    thoughts = [b for b in bodies if _thought_call(b)]
    assert utility and thoughts
    assert all(b["model"] == "claude-haiku-5-5" and "thinking" not in b for b in utility)
    assert all(
        b["model"] == "claude-opus-5-5" and b["thinking"]["type"] == "adaptive" for b in thoughts
    )
    # Each call's record (the export's per-call accounting) says which model and mode it used.
    records = {
        (c.purpose, c.model, c.thinking_mode)
        async for c in ModelCall.objects.filter(session=session, purpose__in=["plan", "thoughts"])
    }
    assert records == {
        ("plan", "claude-haiku-5-5", "off"),
        ("thoughts", "claude-opus-5-5", "adaptive"),
    }


async def test_a_dollar_ceiling_sends_the_session_to_its_final_answer(
    fake_claude: Any, make_session: Any
):
    session = await sync_to_async(make_session)(
        model_id="claude-opus-5-5", max_cost_usd=Decimal("0.01"), token_ceiling=None,
        budget_seconds=600, synthesis_interval_seconds=600,
    )  # fmt: skip
    fake_claude.enqueue(Reply(text="THOUGHT: costly\nTYPE: insight", output_tokens=1000))
    status = await run(session)

    await session.arefresh_from_db()
    assert status == Status.COMPLETED
    assert session.completion_reason == CompletionReason.COST_CEILING
    assert session.estimated_cost >= 0.01 and session.final_answer


# --- starting: model choice, dollar ceilings, team reservations -------------------------


def test_the_start_form_offers_the_servers_models_and_refuses_others(fake_claude: Any, alice: Any):
    llm._model_lists.clear()
    for name in ("claude-opus-5-5", "claude-sonnet-4-5"):
        fake_claude.models[name] = model_info(name)
    form = StartSessionForm({"question": "Q?", "minutes": 1, "model": "claude-opus-9"}, user=alice)
    assert not form.is_valid()
    assert "does not list the model 'claude-opus-9'" in form.errors["model"][0]
    assert ("claude-sonnet-4-5", "claude-sonnet-4-5") in form.fields["model"].widget.choices
    form = StartSessionForm(
        {"question": "Q?", "minutes": 1, "model": "claude-sonnet-4-5", "max_cost_usd": "0.50"},
        user=alice,
    )
    assert form.is_valid(), form.errors
    with transaction.atomic():
        session = form.create_session(owner=alice)
    assert session.model_id == "claude-sonnet-4-5" and session.max_cost_usd == Decimal("0.5")


def test_the_api_takes_a_model_and_a_dollar_ceiling(fake_claude: Any, client: Any, alice: Any):
    llm._model_lists.clear()
    fake_claude.models["claude-opus-5-5"] = model_info("claude-opus-5-5")
    client.force_login(alice)
    refused = client.post(
        "/api/sessions", {"question": "Q?", "minutes": 1, "model": "gpt-9"},
        content_type="application/json",
    )  # fmt: skip
    assert (
        refused.status_code in (400, 422) and "does not list the model" in refused.content.decode()
    )
    made = client.post(
        "/api/sessions",
        {"question": "Q?", "minutes": 1, "model": "claude-opus-5-5", "max_cost_usd": 2.5},
        content_type="application/json",
    )
    assert made.status_code == 201, made.content
    assert made.json()["settings"]["max_cost_usd"] == 2.5
    assert made.json()["settings"]["model"] == "claude-opus-5-5"


def _team(alice: Any, **budgets: Any) -> Team:
    from django.utils import timezone

    from accounts.models import Membership, Role

    team = Team.objects.create(name="Lab", **budgets)
    Membership.objects.create(team=team, user=alice, role=Role.OWNER, accepted_at=timezone.now())
    return team


def _start(alice: Any, team: Team, **fields: Any) -> ThinkingSession:
    form = StartSessionForm({"question": "Q?", "minutes": 1, "team": team.pk, **fields}, user=alice)
    assert form.is_valid(), form.errors
    with transaction.atomic():
        return form.create_session(owner=alice)


def test_running_team_sessions_hold_their_reservations(fake_claude: Any, alice: Any, settings: Any):
    settings.DEEPTHINK_MAX_CONCURRENT_SESSIONS = 10
    team = _team(alice, monthly_cost_budget_usd=Decimal("10"))
    first = _start(alice, team, max_cost_usd="6")
    second = _start(alice, team)
    assert first.max_cost_usd == Decimal("6")
    assert second.max_cost_usd == Decimal("2")  # half of the $4 the first did not reserve
    third = _start(alice, team, max_cost_usd="5")
    assert third.max_cost_usd == Decimal("2")  # all that is left, not what it asked for
    assert first.max_cost_usd + second.max_cost_usd + third.max_cost_usd <= Decimal("10")
    form = StartSessionForm({"question": "Q?", "minutes": 1, "team": team.pk}, user=alice)
    assert not form.is_valid() and "has used its $10" in str(form.errors)
    # The same check under the team's lock at creation, for a start that raced past the form.
    with pytest.raises(budget.BudgetExhausted), transaction.atomic():
        budget.reserve(team, tokens=None, dollars=None)


def test_a_finished_session_frees_what_it_did_not_spend(fake_claude: Any, alice: Any):
    team = _team(alice, monthly_token_budget=10_000)
    first = _start(alice, team, token_ceiling=8000)
    ThinkingSession.objects.filter(pk=first.pk).update(status=Status.COMPLETED, input_tokens=3000)
    second = _start(alice, team)
    assert second.token_ceiling == 3500  # half of the 7,000 left after 3,000 really spent


def test_the_start_page_says_when_the_team_budget_is_reserved(
    fake_claude: Any, client: Any, alice: Any
):
    team = _team(alice, monthly_token_budget=10_000)
    _start(alice, team, token_ceiling=10_000)
    client.force_login(alice)
    page = client.post(
        reverse("session-create"), {"question": "Q2?", "minutes": 1, "team": team.pk}
    )
    assert page.status_code == 422
    assert "running sessions count at their ceilings" in page.content.decode()


@pytest.mark.services
def test_concurrent_team_sessions_never_reserve_past_the_budget(alice: Any, settings: Any):
    """Eight people start team sessions at the same moment, each in its own connection and
    transaction: together they are never promised more than the team's budget."""
    import threading

    from django.db import connection, connections

    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (row locks between connections); run with -m services")
    settings.DEEPTHINK_MAX_CONCURRENT_SESSIONS = 20
    team = _team(alice, monthly_cost_budget_usd=Decimal("10"))
    barrier = threading.Barrier(8)
    made: list[ThinkingSession] = []
    refused: list[str] = []

    def start() -> None:
        try:
            form = StartSessionForm(
                {"question": "Q?", "minutes": 1, "team": team.pk, "max_cost_usd": "3"},
                user=alice,
            )
            assert form.is_valid(), form.errors
            barrier.wait(timeout=10)
            with transaction.atomic():
                made.append(form.create_session(owner=alice))
        except (budget.BudgetExhausted, limits.LimitRefused) as error:
            # Refused by the reservation, or (nothing left at all) by the start limits.
            refused.append(str(error))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=start) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    promised = sum(s.max_cost_usd for s in made)
    assert promised <= Decimal("10")
    assert len(made) == 4 and len(refused) == 4  # $3, $3, $3, then the last $1
    assert sorted(s.max_cost_usd for s in made) == [1, 3, 3, 3]


def test_the_cli_refuses_a_model_the_server_does_not_list(fake_claude: Any, alice: Any):
    from django.core.management import CommandError, call_command

    llm._model_lists.clear()
    fake_claude.models["claude-opus-5-5"] = model_info("claude-opus-5-5")
    with pytest.raises(CommandError, match="does not list the model 'claude-nope'"):
        call_command("think", "Q?", "--model", "claude-nope", "--owner", "alice", "--max-cost", "1")


def test_a_cut_off_thought_is_marked_on_the_page(client: Any, alice: Any, make_session: Any):
    from thinking.models import Thought

    session = make_session()
    Thought.objects.create(
        session=session, sequence=1, text="Half a thought", type="insight", confidence=0.5,
        time_offset_seconds=1.0, truncated=True,
    )  # fmt: skip
    client.force_login(alice)
    html = client.get(session.get_absolute_url()).content.decode()
    assert "cut off" in html and "Half a thought" in html


async def test_each_call_repeats_the_previous_calls_blocks_and_adds_at_the_end(
    fake_claude: Any, make_session: Any, settings: Any
):
    """The prompt cache pays only if the session log is append-only: the blocks of each
    thought call start with every block of the call before it, byte for byte."""
    settings.DEEPTHINK_QUESTIONS_EVERY = 2
    session = await sync_to_async(make_session)(
        budget_seconds=600, synthesis_interval_seconds=600, token_ceiling=60_000
    )
    await run(session)

    def blocks(body: dict) -> list[str]:
        return [
            json.dumps({k: v for k, v in b.items() if k != "cache_control"})
            for b in body["messages"][0]["content"]
        ]

    calls = [
        blocks(r["body"])
        for r in fake_claude.requests
        if _thought_call(r["body"]) and len(r["body"]["messages"]) == 1
    ]
    assert len(calls) >= 4
    for before, after in itertools.pairwise(calls):
        log_before = before[1:-1]  # between the stable header and the moving part
        assert after[1 : 1 + len(log_before)] == log_before or log_before == [
            json.dumps({"type": "text", "text": "(nothing yet)"})
        ]
        assert len(after) > len(before) or log_before == after[1:-1]
    # Over the calls that carry the log: re-ranking (rerank.py) sends a short prompt of its
    # own to the fast model, with nothing worth caching.
    logged = ModelCall.objects.filter(session=session).exclude(purpose="rerank")
    totals = await logged.aaggregate(read=Sum("cache_read_tokens"), paid=Sum("input_tokens"))
    assert totals["read"] > totals["paid"]


def test_manual_thinking_without_a_budget_gets_one_that_fits(fake_claude: Any, alice: Any):
    form = StartSessionForm(
        {
            "question": "Q?",
            "minutes": 1,
            "model": "claude-sonnet-4-5",
            "thinking_mode": "manual",
            "max_tokens": 6000,
        },
        user=alice,
    )
    assert form.is_valid(), form.errors
    assert form.cleaned_data["thinking"].budget_tokens == 3000


async def test_each_calls_record_adds_up_to_the_sessions_usage(fake_claude: Any, make_session: Any):
    # The export's per-call accounting: every call's tokens and time, summing to the
    # session's counters (which its cost is computed from).
    fake_claude.delay = 0.02
    session = await sync_to_async(make_session)(
        budget_seconds=600, synthesis_interval_seconds=600, token_ceiling=60_000
    )
    await run(session)

    await session.arefresh_from_db()
    rows = [c async for c in ModelCall.objects.filter(session=session)]
    assert len(rows) >= 3
    # A prompt read wholly from the cache has no uncached input tokens.
    read = [c.input_tokens + c.cache_read_tokens + c.cache_write_tokens for c in rows]
    assert all(c.duration_ms >= 20 and c.output_tokens for c in rows) and all(read)
    for field in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"):
        assert sum(getattr(c, field) for c in rows) == getattr(session, field), field
    assert session.cache_read_tokens and session.cache_write_tokens
