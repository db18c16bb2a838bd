"""Extended thinking in whole sessions: live reasoning, signatures, caching, cost, ceilings."""

from __future__ import annotations

import json
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.urls import reverse

from fakes.anthropic_server import Reply
from tests.helpers import (
    FrozenClock,
    collect,
    communicator,
    each_call_takes,
    login,
    record_call,
    run,
)
from thinking.deliberation.worker import Supervisor
from thinking.models import CompletionReason, ModelCall, Status, ThinkingSession
from thinking.page import broadcast
from thinking.web.export import session_document


async def _ignore(event: object) -> None:
    return None


@pytest.mark.django_db(transaction=True)
async def test_reasoning_streams_live_and_signatures_never_leave_the_server(
    fake_claude: Any, make_session: Any, alice: Any, settings: Any, closed_supervisors: Any
):
    settings.DEEPTHINK_LIVE_INTERVAL = 0
    fake_claude.delay = 0.05
    session = await sync_to_async(make_session)(
        budget_seconds=0.6, synthesis_interval_seconds=0.3, thinking_mode="adaptive"
    )
    fake_claude.enqueue(Reply(redacted=True, text="THOUGHT: after a redaction\nTYPE: insight"))
    frozen = FrozenClock()
    each_call_takes(fake_claude, frozen, 0.2)  # a few cycles and a synthesis on any machine
    comm = communicator(session.pk, await login(alice), rev=0)
    assert (await comm.connect())[0]

    supervisor = Supervisor(worker_id="w", publish=broadcast.publish, clock=frozen.clock)
    assert await supervisor.start(session.pk)
    frames = await collect(comm, lambda f: "status-completed" in f)
    await supervisor.wait_idle()
    await comm.disconnect()

    live = [f for f in frames if 'id="live-reasoning"' in f and "Thinking…" in f]
    assert live, "a thinking indicator was shown while the model thought"
    assert any("Let me consider" in f for f in frames), "the reasoning text streamed"
    everything = "".join(frames)
    assert "sig-" not in everything and "redacted-" not in everything

    # Stored with what it led to, readable; signatures only in the server-side call log.
    first = await session.thoughts.order_by("sequence").afirst()
    assert "redacted by the provider" in first.reasoning
    later = await session.thoughts.exclude(reasoning="").order_by("-sequence").afirst()
    assert "Let me consider" in later.reasoning
    calls = [c async for c in ModelCall.objects.filter(session=session)]
    assert any("sig-" in json.dumps(c.content) for c in calls)
    await session.arefresh_from_db()
    document = json.dumps(await sync_to_async(session_document)(session))
    assert "sig-" not in document and "redacted-" not in document
    assert "Let me consider" in document  # the reasoning itself is the user's to keep


@pytest.mark.django_db(transaction=True)
async def test_the_page_never_shows_a_signature(
    fake_claude: Any, make_session: Any, alice: Any, client: Any
):
    session = await sync_to_async(make_session)(
        budget_seconds=0.3, synthesis_interval_seconds=60, thinking_mode="manual",
        thinking_budget=2048, max_tokens=8000,
    )  # fmt: skip
    await run(session)
    await sync_to_async(client.force_login)(alice)
    html = (await sync_to_async(client.get)(session.get_absolute_url())).content.decode()
    assert "Model reasoning" in html and "Let me consider" in html
    assert "sig-" not in html
    body = fake_claude.requests[0]["body"]
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}


@pytest.mark.django_db(transaction=True)
async def test_the_stable_prefix_is_read_from_the_prompt_cache(fake_claude: Any, make_session: Any):
    """Over a 10-cycle session, a large share of input tokens repeats an earlier prefix."""
    session = await sync_to_async(make_session)(
        budget_seconds=600, synthesis_interval_seconds=600, token_ceiling=None
    )
    cycles = 0

    def ten_cycles(body: dict) -> Reply:
        nonlocal cycles
        reply = fake_claude.scripted_mind(body)
        if "THOUGHT:" in json.dumps(body["messages"]):
            cycles += 1
            if cycles == 10:
                ThinkingSession.objects.filter(pk=session.pk).update(budget_seconds=0.001)
        return reply

    fake_claude.responder = ten_cycles
    await run(session)

    share = fake_claude.cached_share
    print(f"\nprompt cache: {share:.0%} of input tokens read from cache over {cycles} cycles")
    first = fake_claude.requests[0]["body"]
    assert first["system"][0]["cache_control"] == {"type": "ephemeral"}
    content = first["messages"][0]["content"]
    # The stable part and the end of the session log are breakpoints; the moving part is last.
    assert content[0]["cache_control"] == {"type": "ephemeral"}
    assert content[-2]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in content[-1]
    assert share > 0.25
    await session.arefresh_from_db()
    assert session.cache_read_tokens > 0 and session.cache_write_tokens > 0


@pytest.mark.django_db(transaction=True)
async def test_a_token_ceiling_sends_the_session_to_its_final_answer(
    fake_claude: Any, make_session: Any
):
    session = await sync_to_async(make_session)(
        budget_seconds=600, synthesis_interval_seconds=600, token_ceiling=3000
    )
    status = await run(session)

    await session.arefresh_from_db()
    assert status == Status.COMPLETED
    assert session.completion_reason == CompletionReason.TOKEN_CEILING
    assert session.final_answer
    assert session.active_seconds < 60
    calls = await ModelCall.objects.filter(session=session).acount()
    assert calls <= 6, "it stopped spending soon after the ceiling"


@pytest.mark.django_db
def test_usage_and_cost_show_on_the_page_and_in_the_admin(
    client: Any, alice: Any, make_session: Any, django_user_model: Any
):
    session = make_session(model_id="claude-opus-5-5", status=Status.COMPLETED)
    record_call(
        session, model="claude-opus-5-5", input_tokens=1_000_000, output_tokens=100_000,
        cache_read_tokens=1_000_000,
    )  # fmt: skip
    # The plan on the fast model: $0.10 / $0.50 per million tokens.
    record_call(session, model="claude-haiku-5-5", purpose="plan", input_tokens=1_000_000)
    assert session.estimated_cost == pytest.approx(4 + 2 + 0.4 + 0.1)
    client.force_login(alice)
    html = client.get(session.get_absolute_url()).content.decode()
    assert "$6.5000" in html and "3100000" in html
    # Per model: calls, tokens, cost.
    assert "<td>claude-opus-5-5</td><td>1</td><td>2100000</td><td>$6.4000</td>" in html
    assert "<td>claude-haiku-5-5</td><td>1</td><td>1000000</td><td>$0.1000</td>" in html
    client.force_login(django_user_model.objects.create_superuser("root", password="pw"))
    admin = client.get(reverse("admin:thinking_thinkingsession_change", args=[session.pk]))
    page = admin.content.decode()
    assert "6.5" in page
    assert "<td>claude-opus-5-5</td><td>1</td><td>2100000</td><td>$6.4000</td>" in page


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("data", "field_error"),
    [
        ({"thinking_mode": "manual", "thinking_budget": "512"}, "at least 1024"),
        (
            {"thinking_mode": "manual", "thinking_budget": "9000", "max_tokens": "8000"},
            "less than max tokens",
        ),
        ({"thinking_mode": "weird"}, "Select a valid choice"),
        ({"effort": "ultra"}, "Select a valid choice"),
    ],
)
def test_the_form_refuses_invalid_thinking_settings(
    client: Any, alice: Any, fake_claude: Any, settings: Any, data: dict, field_error: str
):
    settings.DEEPTHINK_MODEL = "claude-sonnet-4-6"  # accepts manual and adaptive
    client.force_login(alice)
    response = client.post(reverse("session-create"), {"question": "Q?", "minutes": "1", **data})
    assert response.status_code == 422
    assert field_error in response.content.decode()
    assert not ThinkingSession.objects.exists()


@pytest.mark.django_db
def test_the_form_refuses_a_mode_the_model_does_not_accept(
    client: Any, alice: Any, fake_claude: Any, settings: Any
):
    settings.DEEPTHINK_MODEL = "claude-opus-5-5"
    client.force_login(alice)
    response = client.post(
        reverse("session-create"),
        {"question": "Q?", "minutes": "1", "thinking_mode": "manual", "thinking_budget": "2048"},
    )
    assert "does not accept manual thinking" in response.content.decode()


@pytest.mark.django_db
def test_the_form_stores_the_thinking_settings(
    client: Any, alice: Any, fake_claude: Any, settings: Any
):
    settings.DEEPTHINK_MODEL = "claude-sonnet-4-6"
    client.force_login(alice)
    client.post(
        reverse("session-create"),
        {
            "question": "Q?", "minutes": "1", "thinking_mode": "manual",
            "thinking_budget": "3000", "effort": "low", "max_tokens": "9000",
            "token_ceiling": "50000",
        },
    )  # fmt: skip
    session = ThinkingSession.objects.get()
    assert (session.thinking_mode, session.thinking_budget, session.effort) == (
        "manual",
        3000,
        "low",
    )
    assert (session.max_tokens, session.token_ceiling) == (9000, 50000)


@pytest.mark.django_db(transaction=True)
def test_the_cli_takes_thinking_options_and_refuses_bad_ones(fake_claude: Any, alice: Any):
    from io import StringIO

    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match="at least 1024"):
        call_command("think", "Q?", "--thinking", "manual", "--thinking-budget", "10")
    out = StringIO()
    call_command(
        "think", "Q?", "--minutes", "0.05", "--thinking", "off", "--token-ceiling", "2000",
        "--json", stdout=out,
    )  # fmt: skip
    doc = json.loads(out.getvalue())
    assert doc["completion_reason"] == "token_ceiling"
    assert "thinking" not in fake_claude.requests[0]["body"]
