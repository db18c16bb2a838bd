"""Issue 70: each call priced by its own model, ceilings that hold the final answer inside
them, operators' prices, and the cost estimate before a start. Against the fake Claude."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from io import StringIO
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from accounts.tokens import create_token
from tests.helpers import FrozenClock, bearer, each_call_takes, in_fresh_python, post, run
from thinking.models import (
    CitationCheck,
    CompletionReason,
    ModelCall,
    Source,
    Status,
    ThinkingSession,
)
from thinking.provider import pricing
from thinking.web.forms import StartSessionForm

# List prices per million tokens, as the by-hand check reads them (input, output);
# cache reads cost a tenth of input, cache writes 1.25 times.
OPUS = (4.0, 20.0)  # claude-opus-5-5
HAIKU = (0.10, 0.50)  # claude-haiku-5-5


def by_hand(call: ModelCall) -> Decimal:
    """One call at its own model's price, worked out here rather than by `pricing`."""
    per_input, per_output = {"claude-opus-5-5": OPUS, "claude-haiku-5-5": HAIKU}[call.model]
    dollars = (
        Decimal(call.input_tokens) * Decimal(str(per_input))
        + Decimal(call.output_tokens) * Decimal(str(per_output))
        + Decimal(call.cache_read_tokens) * Decimal(str(per_input)) / 10
        + Decimal(call.cache_write_tokens) * Decimal(str(per_input)) * Decimal("1.25")
    )
    return dollars / 1_000_000


# --- each call priced by its own model --------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_a_session_with_a_fast_model_is_priced_call_by_call(
    fake_claude: Any, make_session: Any, settings: Any
):
    settings.DEEPTHINK_FAST_MODEL = "claude-haiku-5-5"
    frozen = FrozenClock()
    each_call_takes(fake_claude, frozen, 1.0)
    session = await sync_to_async(make_session)(
        model_id="claude-opus-5-5", plan={}, budget_seconds=12, synthesis_interval_seconds=5
    )

    assert await run(session, clock=frozen.clock) == Status.COMPLETED

    await session.arefresh_from_db()
    calls = [c async for c in session.model_calls.all()]
    models = {c.model for c in calls}
    assert models == {"claude-opus-5-5", "claude-haiku-5-5"}, "the plan and lists are fast"
    expected = sum((by_hand(c) for c in calls), Decimal(0))
    assert session.cost_usd == pytest.approx(expected, abs=Decimal("0.000001") * len(calls))
    assert session.estimated_cost == pytest.approx(float(expected), abs=1e-5)
    # Every token at the main model's price would say more: the fast model's calls are cheap.
    all_at_opus = sum(
        (
            by_hand(ModelCall(model="claude-opus-5-5", **tokens))
            for tokens in await sync_to_async(
                lambda: list(
                    session.model_calls.values(
                        "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"
                    )
                )
            )()
        ),
        Decimal(0),
    )
    assert all_at_opus > expected
    # Split per model, the same figures.
    split = dict(session.model_usage)
    for model in models:
        rows = [c for c in calls if c.model == model]
        assert split[model].calls == len(rows)
        assert split[model].tokens == sum(
            c.input_tokens + c.output_tokens + c.cache_read_tokens + c.cache_write_tokens
            for c in rows
        )
        assert split[model].cost == pytest.approx(float(sum(by_hand(c) for c in rows)), abs=1e-5)
        assert all(c.cost_usd == pytest.approx(by_hand(c), abs=Decimal("0.000001")) for c in rows)


@pytest.mark.django_db
def test_operators_prices_are_merged_over_the_built_in_table(settings: Any):
    settings.DEEPTHINK_PRICES = {
        "qwen3": {"input": 0.2, "output": 0.6},
        "claude-opus-5-5": [8.0, 40.0, 1.0, 9.0],
    }
    assert pricing.price_for("qwen3-32b") == pricing.Price(0.2, 0.6, 0.02, 0.25)
    assert pricing.price_for("claude-opus-5-5") == pricing.Price(8.0, 40.0, 1.0, 9.0)
    assert pricing.price_for("claude-sonnet-5-5") == pricing.Price.of(2.0, 10.0)  # built in
    assert pricing.price_for("llama-3") is None
    cost = pricing.call_cost("qwen3-32b", input_tokens=1_000_000, output_tokens=1_000_000)
    assert cost == Decimal("0.800000")


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ("[1, 2]", "give a JSON object"),
        ('{"m": [1]}', "give [input, output]"),
        ('{"m": {"input": 1}}', "the output price is missing"),
        ('{"m": {"input": 1, "output": -2}}', "output must be a number"),
        ('{"m": {"input": 1, "output": 2, "cached": 3}}', "unknown price 'cached'"),
        ("{m: 1}", "not valid JSON"),
    ],
)
def test_a_price_table_that_is_not_one_says_what_is_wrong(raw: str, problem: str):
    with pytest.raises(ValueError, match=re.escape(problem)):
        pricing.parse_prices(raw)


def test_deepthink_prices_is_read_from_the_environment_and_checked_at_start_up():
    shown = in_fresh_python(
        "from django.conf import settings; print(settings.DEEPTHINK_PRICES)",
        DEEPTHINK_PRICES='{"local-llm": {"input": 0.5, "output": 1.5}}',
    )
    assert shown.returncode == 0, shown.stderr
    assert "'local-llm': {'input': 0.5, 'output': 1.5, 'cache_read': 0.05" in shown.stdout
    broken = in_fresh_python(
        "from django.conf import settings; settings.DEEPTHINK_PRICES",
        DEEPTHINK_PRICES='{"local-llm": 3}',
    )
    assert broken.returncode != 0
    assert "DEEPTHINK_PRICES: 'local-llm': prices must be an object" in broken.stderr


# --- ceilings that hold ----------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("ceiling", "reason"),
    [
        ({"max_cost_usd": Decimal("0.01")}, CompletionReason.COST_CEILING),
        ({"max_cost_usd": Decimal("0.05")}, CompletionReason.COST_CEILING),
        ({"token_ceiling": 60_000}, CompletionReason.TOKEN_CEILING),
    ],
    ids=["0.01-dollars", "0.05-dollars", "60k-tokens"],
)
async def test_a_ceiling_holds_with_the_final_answer_inside_it(
    fake_claude: Any, make_session: Any, settings: Any, ceiling: dict[str, Any], reason: str
):
    """The loop stops thinking while the answer (and its citation check) still fits: the
    session ends at or under its ceiling, never more than 5% over, with its answer."""
    settings.DEEPTHINK_FAST_MODEL = ""
    frozen = FrozenClock()
    each_call_takes(fake_claude, frozen, 1.0)
    session = await sync_to_async(make_session)(
        model_id="claude-haiku-5-5",  # $0.10 / $0.50 per million tokens
        budget_seconds=3600,  # time never ends it
        synthesis_interval_seconds=20,
        **ceiling,
    )
    for number in (1, 2):  # sources the syntheses cite: each one's citations are checked
        await Source.objects.acreate(
            session=session,
            number=number,
            kind="web",
            title=f"Source {number}",
            snippet="The outcome depends mainly on context and scale in typical cases.",
            key=f"https://example.org/{number}",
        )

    assert await run(session, clock=frozen.clock) == Status.COMPLETED

    await session.arefresh_from_db()
    assert session.completion_reason == reason
    assert session.final_answer
    assert await session.syntheses.filter(is_final=True).aexists()
    assert await session.syntheses.filter(is_final=False).aexists(), "it thought a while"
    final = await session.syntheses.aget(is_final=True)
    assert await CitationCheck.objects.filter(synthesis=final).aexists(), "and checked it"
    if "max_cost_usd" in ceiling:
        limit = ceiling["max_cost_usd"]
        assert session.cost_usd <= limit * Decimal("1.05")
        assert session.cost_usd >= limit * Decimal("0.6"), "most of it was used"
    else:
        limit = ceiling["token_ceiling"]
        assert session.total_tokens <= limit * 1.05
        assert session.total_tokens >= limit * 0.6


@pytest.mark.django_db
def test_the_reserve_comes_from_the_sessions_own_calls(make_session: Any):
    """Nothing reserved before the first call; then the next step, the final answer (a
    synthesis and its review of what was written) and its check, from this session's own
    calls, with a margin."""
    from tests.helpers import record_call
    from thinking.people import budget

    session = make_session(model_id="claude-opus-5-5", max_cost_usd=Decimal("1"))
    assert budget.reserved(session, dollars=True) == 0
    # A thought cycle: $0.04 in, $0.01 out ($4 / $20 per million tokens).
    record_call(session, model="claude-opus-5-5", input_tokens=10_000, output_tokens=500)
    ThinkingSession.objects.filter(pk=session.pk).update(cycles=1)
    session.refresh_from_db()
    # No synthesis yet: a synthesis and a check are reckoned at the mean call ($0.05); the
    # final answer's review reads the 500 tokens written ($0.002).
    assert budget.reserved(session, dollars=True) == pytest.approx(
        budget.SAFETY * ((0.05 + 0.05) + (0.05 + 0.002) + 0.05)
    )
    assert budget.reserved(session, dollars=False) == pytest.approx(
        budget.SAFETY * ((10_500 + 10_500) + (10_500 + 500) + 10_500)
    )
    record_call(session, model="claude-opus-5-5", purpose="synthesis", input_tokens=50_000)
    record_call(session, model="claude-opus-5-5", purpose="check", input_tokens=5_000)
    # A synthesis $0.20 and its check $0.02: dearer than a cycle ($0.05), so next.
    assert budget.reserved(session, dollars=True) == pytest.approx(
        budget.SAFETY * ((0.20 + 0.02) + (0.20 + 0.002) + 0.02)
    )
    assert budget.ceiling_reached(session) == ""  # $0.27 spent + $0.663 reserved < $1
    record_call(session, model="claude-opus-5-5", input_tokens=20_000)
    assert budget.ceiling_reached(session) == CompletionReason.COST_CEILING  # $0.35 + $0.663


# --- prices and ceilings at the start -----------------------------------------------------


@pytest.fixture
def local_model(settings: Any, fake_claude: Any) -> str:
    """A model the deployment runs but no price table knows."""
    settings.DEEPTHINK_MODEL = "local-llm"
    settings.DEEPTHINK_FAST_MODEL = ""
    return "local-llm"


@pytest.mark.django_db
def test_a_dollar_ceiling_on_an_unpriced_model_is_refused_on_the_form_until_priced(
    local_model: str, alice: Any, settings: Any
):
    data = {"question": "Q?", "minutes": 1, "max_cost_usd": "0.01"}
    form = StartSessionForm(data, user=alice)
    assert not form.is_valid()
    [message] = form.errors["max_cost_usd"]
    assert message.startswith("No price is known for the model 'local-llm'.")
    assert "DEEPTHINK_PRICES" in message and "a dollar ceiling cannot be held" in message
    assert StartSessionForm({**data, "max_cost_usd": ""}, user=alice).is_valid()

    settings.DEEPTHINK_PRICES = {"local-llm": {"input": 0.5, "output": 1.5}}
    assert StartSessionForm(data, user=alice).is_valid()


@pytest.mark.django_db
def test_a_default_dollar_ceiling_needs_a_price_too(local_model: str, alice: Any, settings: Any):
    settings.DEEPTHINK_MAX_COST_USD = 0.5
    form = StartSessionForm({"question": "Q?", "minutes": 1}, user=alice)
    assert not form.is_valid() and "DEEPTHINK_PRICES" in form.errors["max_cost_usd"][0]


@pytest.mark.django_db
def test_an_unpriced_fast_model_is_named(alice: Any, settings: Any, fake_claude: Any):
    settings.DEEPTHINK_FAST_MODEL = "local-fast"
    form = StartSessionForm({"question": "Q?", "minutes": 1, "max_cost_usd": "1"}, user=alice)
    assert not form.is_valid()
    assert "No price is known for the model 'local-fast'" in form.errors["max_cost_usd"][0]


@pytest.mark.django_db
def test_the_api_refuses_an_unpriced_dollar_ceiling_then_accepts_it_once_priced(
    local_model: str, alice: Any, settings: Any
):
    api = bearer(create_token(alice, "t")[1])
    body = {"question": "Q?", "minutes": 1, "max_cost_usd": 0.01}
    refused = post(api, "/api/sessions", body)
    assert refused.status_code == 422
    [problem] = refused.json()["detail"]
    assert problem["loc"] == ["body", "payload", "max_cost_usd"]
    assert "DEEPTHINK_PRICES" in problem["msg"]
    assert not ThinkingSession.objects.exists()

    settings.DEEPTHINK_PRICES = {"local-llm": [0.5, 1.5]}
    started = post(api, "/api/sessions", body)
    assert started.status_code == 201
    assert started.json()["settings"]["max_cost_usd"] == 0.01


@pytest.mark.django_db
def test_the_cli_refuses_an_unpriced_dollar_ceiling(local_model: str, alice: Any):
    with pytest.raises(CommandError) as refused:
        call_command("think", "Q?", "--minutes", "1", "--max-cost", "0.01", "--owner", "alice")
    assert "No price is known for the model 'local-llm'" in str(refused.value)
    assert "DEEPTHINK_PRICES" in str(refused.value)
    assert not ThinkingSession.objects.exists()


# --- the estimate before the start ----------------------------------------------------------


@pytest.mark.django_db
def test_the_api_estimates_a_session_without_starting_one(alice: Any, settings: Any):
    settings.DEEPTHINK_FAST_MODEL = ""
    api = bearer(create_token(alice, "t")[1])
    found = post(api, "/api/sessions/estimate", {"minutes": 10, "model": "claude-opus-5-5"})
    assert found.status_code == 200
    body = found.json()
    assert body["source"].startswith("built-in figures")
    assert body["calls"] == 30 and body["calls_per_minute"] == 3.0
    assert 0 < body["low_usd"] < body["expected_usd"] < body["high_usd"]
    assert "Estimated cost: $" in body["summary"] and "10 minutes" in body["summary"]
    assert not ThinkingSession.objects.exists()

    # A ceiling bounds it; a cheaper model costs less; twice the time, twice the cost.
    capped = post(api, "/api/sessions/estimate", {"minutes": 10, "max_cost_usd": 0.05}).json()
    assert capped["high_usd"] == 0.05 and capped["capped_by"] == "the cost ceiling"
    cheap = post(api, "/api/sessions/estimate", {"minutes": 10, "model": "claude-haiku-5-5"})
    assert cheap.json()["expected_usd"] < body["expected_usd"] / 10
    longer = post(api, "/api/sessions/estimate", {"minutes": 20, "model": "claude-opus-5-5"})
    assert longer.json()["expected_usd"] == pytest.approx(2 * body["expected_usd"], rel=0.01)

    # Validated like a start; an unknown field is named.
    bad = post(api, "/api/sessions/estimate", {"minutes": 0, "modle": "x"})
    assert bad.status_code == 422
    assert {tuple(p["loc"]) for p in bad.json()["detail"]} == {("body", "payload", "modle")}
    schema = Client().get("/api/openapi.json").json()
    assert "Estimate" in schema["paths"]["/api/sessions/estimate"]["post"]["summary"]


@pytest.mark.django_db
def test_the_estimate_is_measured_on_this_server_once_it_has_sessions(
    make_session: Any, settings: Any
):
    """Calls per thinking-minute and tokens per call from the last completed sessions with
    the same research setting; research off is measured apart."""
    from tests.helpers import record_call
    from thinking.people import estimates

    settings.DEEPTHINK_FAST_MODEL = ""
    for _ in range(estimates.MIN_SESSIONS):
        session = make_session(status=Status.COMPLETED, active_seconds=120.0)
        for _ in range(8):  # 8 thought calls and 2 plans in 2 minutes: 5 a minute
            record_call(session, model="claude-opus-5-5", input_tokens=1000, output_tokens=100)
        for _ in range(2):
            record_call(session, model="claude-opus-5-5", purpose="plan", input_tokens=500)
    measured = estimates.estimate(model="claude-opus-5-5", minutes=4)
    assert measured.source.startswith("measured on this server from its last 3 completed")
    assert measured.calls_per_minute == 5.0 and measured.calls == 20
    # 16 calls of 1,100 tokens and 4 of 500 tokens.
    assert measured.tokens == 16 * 1100 + 4 * 500
    assert measured.expected == pytest.approx(16 * (0.004 + 0.002) + 4 * 0.002)
    assert estimates.estimate(model="claude-opus-5-5", minutes=4, research=False).source == (
        estimates.BUILT_IN.source
    )


@pytest.mark.django_db
def test_the_start_page_shows_the_estimate_and_updates_it(client: Any, alice: Any):
    client.force_login(alice)
    page = client.get(reverse("home")).content.decode()
    assert 'id="estimate"' in page and "Estimated cost: $" in page
    assert 'hx-trigger="change from:closest form"' in page
    partial = client.get(
        reverse("session-estimate"),
        {"minutes": "30", "model": "claude-haiku-5-5", "research": "off", "question": "Q?"},
    ).content.decode()
    assert "30 minutes on claude-haiku-5-5" in partial
    invalid = client.get(reverse("session-estimate"), {"minutes": "x"}).content.decode()
    assert "Give a valid budget" in invalid
    one = client.get(reverse("session-estimate"), {"minutes": "1"}).content.decode()
    assert "1 minute on" in one


@pytest.mark.django_db
def test_the_cli_prints_the_estimate(alice: Any, settings: Any):
    out = StringIO()
    call_command("think", "--estimate", "--minutes", "5", "--model", "claude-opus-5-5", stdout=out)
    assert out.getvalue().startswith("Estimated cost: $")
    assert "5 minutes on claude-opus-5-5" in out.getvalue()
    out = StringIO()
    call_command("think", "--estimate", "--minutes", "5", "--json", stdout=out)
    assert json.loads(out.getvalue())["minutes"] == 5
    assert not ThinkingSession.objects.exists()
