"""Other model servers (#72): a whole session against each kind of server the fakes imitate,
through the real SDKs over HTTP. An Anthropic-compatible local server without thinking,
prompt caching or a models list; a server that refuses tool definitions (its sessions use
the plan's research); OpenAI-compatible reasoning models whose reasoning comes as
`reasoning_content` deltas or inside `<think>` in the text. The model's reasoning reaches
the reasoning panel and never a stored thought, synthesis or answer."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from fakes.anthropic_server import HttpError, Reply, StreamCut, StreamError
from fakes.openai_server import REASONING_MARK, FakeOpenAI
from tests.helpers import FrozenClock, each_call_takes, run
from thinking.models import Source, Status, SubQuestion, Synthesis, ThinkingSession, Thought
from thinking.provider import llm, openai_chat
from thinking.provider.llm import LLM, LLMError, OpenAICompatibleLLM

MakeOpenAI = Callable[..., FakeOpenAI]


@pytest.fixture(autouse=True)
def _forget_refusals() -> None:
    llm._refused.clear()  # a fake on a port an earlier test's used is a new server


@pytest.fixture
def fake_openai(settings: Any) -> Iterator[MakeOpenAI]:
    """Starts a fake OpenAI-compatible server and points the settings at it."""
    servers: list[FakeOpenAI] = []

    def start(**options: Any) -> FakeOpenAI:
        server = FakeOpenAI(**options).start()
        servers.append(server)
        settings.DEEPTHINK_PROVIDER = "openai"
        settings.OPENAI_BASE_URL = server.api_url
        settings.OPENAI_API_KEY = "test-key"
        return server

    yield start
    for server in servers:
        server.stop()


async def whole_session(fake: Any, make_session: Any, **fields: Any) -> ThinkingSession:
    """A planned, researched session run to its end, each call a second of its clock."""
    frozen = FrozenClock()
    each_call_takes(fake, frozen, 1.0)
    fields = {"plan": {}, "budget_seconds": 14.0, "synthesis_interval_seconds": 6.0, **fields}
    session = await sync_to_async(make_session)(**fields)
    await run(session, clock=frozen.clock)
    await session.arefresh_from_db()
    return session


async def stored_texts(session: ThinkingSession) -> list[str]:
    """Everything a person reads as the session's thinking: thoughts (with their tag-format
    parts), syntheses, sub-questions and the answer."""
    texts = [session.final_answer]
    async for thought in Thought.objects.filter(session=session):
        texts += [thought.text, json.dumps(thought.parts)]
    async for synthesis in Synthesis.objects.filter(session=session):
        texts += [synthesis.text, json.dumps(synthesis.key_insights)]
    texts += [q async for q in SubQuestion.objects.filter(session=session).values_list("text")]
    return [str(text) for text in texts]


async def reasoning_shown(session: ThinkingSession) -> list[str]:
    thoughts = [t async for t in Thought.objects.filter(session=session).values_list("reasoning")]
    syntheses = [
        s async for s in Synthesis.objects.filter(session=session).values_list("reasoning")
    ]
    return [text for (text,) in [*thoughts, *syntheses] if text]


def found_by(session: ThinkingSession) -> set[str]:
    return set(Source.objects.filter(session=session).values_list("found_by", flat=True))


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("reasoning", ["reasoning_content", "reasoning", "think_tags"])
async def test_a_whole_session_on_an_openai_compatible_reasoning_model(
    fake_openai: MakeOpenAI, fake_exa: Any, make_session: Any, reasoning: str
):
    fake = fake_openai(reasoning=reasoning)
    session = await whole_session(fake, make_session, model_id="qwen3:8b")

    assert session.status == Status.COMPLETED
    assert session.final_answer and session.final_confidence is not None
    texts = await stored_texts(session)
    assert not [t for t in texts if REASONING_MARK in t or "<think>" in t], "no reasoning kept"
    # The thought cycles used the tag format, whose own parts survived the split.
    assert await Thought.objects.filter(session=session).exclude(parts={}).aexists()
    shown = await reasoning_shown(session)
    assert shown and all(REASONING_MARK in text for text in shown)
    # The tools went over the chat wire: calls out, results back as tool messages.
    assert any(m["role"] == "tool" for body in fake.requests for m in body["messages"])
    assert session.search_tally["web_search"]["searches"] > 0
    assert session.input_tokens > 0 and session.output_tokens > 0
    assert session.unpriced_calls > 0, "a model without a price is counted, not priced"
    assert all(body["stream_options"] == {"include_usage": True} for body in fake.requests)


@pytest.mark.django_db(transaction=True)
async def test_a_whole_session_on_a_local_anthropic_server_without_thinking_or_caching(
    fake_claude: Any, fake_exa: Any, make_session: Any
):
    fake_claude.takes_thinking = False
    fake_claude.caches_prompts = False  # and no models list: fake_claude.models is empty
    session = await whole_session(
        fake_claude, make_session, model_id="qwen3:8b", thinking_mode="auto"
    )

    assert session.status == Status.COMPLETED and session.final_answer
    asked = [r["body"] for r in fake_claude.requests]
    thinking = [i for i, body in enumerate(asked) if body.get("thinking")]
    # The server refused thinking once; no later call asked for it again.
    assert len(thinking) == 1 and thinking[0] < len(asked) - 1
    assert session.cache_read_tokens == session.cache_write_tokens == 0
    assert session.search_tally["web_search"]["searches"] > 0, "its tools still work"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("wire", ["anthropic", "openai"])
async def test_a_server_that_refuses_tools_runs_on_the_plans_research(
    fake_claude: Any, fake_openai: MakeOpenAI, fake_exa: Any, make_session: Any, wire: str
):
    if wire == "openai":
        fake: Any = fake_openai(takes_tools=False)
    else:
        fake = fake_claude
        fake.takes_tools = False
    session = await whole_session(fake, make_session, model_id="llama3.2")

    assert session.status == Status.COMPLETED and session.final_answer
    if wire == "openai":
        offered = [bool(body.get("tools")) for body in fake.requests]
    else:
        offered = [bool(r["body"].get("tools")) for r in fake.requests]
    assert offered.count(True) == 1, "refused once, then never offered again"
    assert await Thought.objects.filter(session=session).aexists()
    assert set(session.search_tally) == {"plan"}, "the plan's research stands in"
    assert await sync_to_async(found_by)(session) == {"plan"}


# --- the wire, call by call -----------------------------------------------------------------


@pytest.fixture
async def chat_llm(fake_openai: MakeOpenAI) -> Any:
    fake = fake_openai()
    client = LLM.from_settings()
    yield fake, client
    await client.close()


async def test_the_openai_provider_streams_text_and_counts_usage(chat_llm: Any):
    fake, client = chat_llm
    assert isinstance(client, OpenAICompatibleLLM)
    fake.enqueue(Reply(text="Hello there, a long enough reply.", input_tokens=40, output_tokens=9))
    seen: list[str] = []

    async def on_text(delta: str) -> None:
        seen.append(delta)

    reply = await client.stream(
        [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
        system="Be brief.",
        on_text=on_text,
    )

    assert reply.text == "Hello there, a long enough reply." == "".join(seen)
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (40, 9)
    assert reply.stop_reason == "end_turn" and reply.thinking_mode == "off"
    [body] = fake.requests
    assert body["messages"][0] == {"role": "system", "content": "Be brief."}
    assert body["messages"][1] == {"role": "user", "content": "Hi"}


async def test_tool_calls_come_back_as_tool_uses_and_their_results_as_tool_messages(
    chat_llm: Any,
):
    fake, client = chat_llm
    use = {"id": "call_1", "name": "web_search", "input": {"query": "tides", "max_results": 3}}
    fake.enqueue(Reply(text="", tool_uses=[use]), Reply(text="Done."))
    tools = [{"name": "web_search", "description": "Search.", "input_schema": {"type": "object"}}]
    ask = [{"role": "user", "content": "Find tides."}]

    first = await client.stream(ask, system="s", tools=tools)
    assert first.stop_reason == "tool_use"
    assert [(u["id"], u["name"], u["input"]) for u in first.tool_uses] == [
        ("call_1", "web_search", {"query": "tides", "max_results": 3})
    ]
    result = {"type": "tool_result", "tool_use_id": "call_1", "content": "[1] Tide tables"}
    turn = {"role": "assistant", "content": first.content}
    await client.stream(
        [*ask, turn, {"role": "user", "content": [result]}], system="s", tools=tools
    )

    sent = fake.requests[1]["messages"]
    assert sent[2]["tool_calls"][0]["function"] == {
        "name": "web_search",
        "arguments": json.dumps({"query": "tides", "max_results": 3}),
    }
    assert sent[3] == {"role": "tool", "tool_call_id": "call_1", "content": "[1] Tide tables"}
    assert fake.requests[0]["tools"][0]["function"]["parameters"] == {"type": "object"}


async def test_a_reply_that_breaks_off_is_asked_again(chat_llm: Any):
    fake, client = chat_llm
    fake.enqueue(StreamError(type="server_error", message="boom"), Reply(text="Whole."))
    restarts: list[int] = []

    async def on_restart() -> None:
        restarts.append(1)

    reply = await client.stream(
        [{"role": "user", "content": "Hi"}], system="s", on_restart=on_restart
    )
    assert reply.text == "Whole." and restarts == [1] and len(fake.requests) == 2


async def test_a_connection_lost_mid_reply_is_asked_again(chat_llm: Any):
    fake, client = chat_llm
    fake.enqueue(StreamCut(text_before="half a "), Reply(text="Whole again."))
    shown: list[str] = []

    async def on_text(delta: str) -> None:
        shown.append(delta)

    async def on_restart() -> None:
        shown.clear()

    reply = await client.stream(
        [{"role": "user", "content": "Hi"}], system="s", on_text=on_text, on_restart=on_restart
    )
    assert reply.text == "Whole again." == "".join(shown) and len(fake.requests) == 2


async def test_an_unrelated_refusal_is_not_taken_for_a_missing_feature(chat_llm: Any):
    fake, client = chat_llm
    fake.enqueue(HttpError(400, "invalid_request_error", "max_tokens is too large"))
    tools = [{"name": "think", "input_schema": {"type": "object"}}]
    with pytest.raises(LLMError) as raised:
        await client.stream([{"role": "user", "content": "Hi"}], system="s", tools=tools)
    assert raised.value.kind == "bad_request" and "max_tokens is too large" in str(raised.value)
    assert len(fake.requests) == 1


async def test_an_unreachable_server_names_the_setting_to_check(settings: Any):
    settings.DEEPTHINK_PROVIDER = "openai"
    settings.OPENAI_BASE_URL = "http://127.0.0.1:9/v1"
    client = LLM.from_settings()
    client.chat = client.chat.with_options(max_retries=0)
    try:
        with pytest.raises(LLMError) as raised:
            await client.stream([{"role": "user", "content": "Hi"}], system="s")
    finally:
        await client.close()
    assert "OPENAI_BASE_URL" in str(raised.value) and raised.value.retryable


# --- reasoning inside the text -------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "format_think", "expected"),
    [
        ("<think>\nhmm\n</think>\n\nANSWER: yes", False, ("hmm", "ANSWER: yes")),
        ("ANSWER: yes", False, ("", "ANSWER: yes")),
        ("<think>cut off mid-thought", False, ("cut off mid-thought", "")),
        # The tag format asks for <think>: the reply's own is kept...
        ("<think>a</think><interactive/>", True, ("", "<think>a</think><interactive/>")),
        # ...unless the model's reasoning came first.
        ("<think>r</think>\n<think>a</think><x/>", True, ("r", "<think>a</think><x/>")),
    ],
)  # fmt: skip
def test_a_leading_think_block_is_reasoning(text: str, format_think: bool, expected: tuple):
    assert openai_chat.split_reasoning(text, format_think=format_think) == expected


async def test_think_tags_split_across_deltas_reach_the_right_callbacks():
    thinking: list[str] = []
    text: list[str] = []

    async def on_thinking(delta: str) -> None:
        thinking.append(delta)

    async def on_text(delta: str) -> None:
        text.append(delta)

    live = openai_chat._LiveSplit(on_text, on_thinking)
    for delta in ["  <th", "ink>weigh", "ing it</th", "ink>\nANSWER", ": yes"]:
        await live.feed(delta)
    assert "".join(thinking) == "weighing it"
    assert "".join(text) == "\nANSWER: yes"


# --- which models a session may pick ---------------------------------------------------------


def test_the_models_an_openai_server_lists_are_offered(fake_openai: MakeOpenAI):
    llm._model_lists.clear()
    fake_openai(models=["qwen3:8b", "llama3.2"])
    models = llm.available_models()
    assert models == llm.ModelList(("qwen3:8b", "llama3.2"), source="api")
    assert "does not list the model 'gpt-9'" in llm.refuse_model("gpt-9")


def test_without_a_list_an_openai_server_offers_the_configured_models(
    fake_openai: MakeOpenAI, settings: Any
):
    llm._model_lists.clear()
    fake_openai(models=None)
    settings.DEEPTHINK_MODEL, settings.DEEPTHINK_FAST_MODEL = "qwen3:32b", "qwen3:4b"
    assert llm.available_models().ids == ("qwen3:32b", "qwen3:4b")
    assert "not one of the models this deployment offers" in llm.refuse_model("claude-opus-5-5")


def test_the_operators_list_wins_over_the_servers(fake_claude: Any, settings: Any):
    llm._model_lists.clear()
    settings.DEEPTHINK_MODELS = ["claude-haiku-5-5"]
    assert llm.available_models().ids == (settings.DEEPTHINK_MODEL, "claude-haiku-5-5")
    assert llm.refuse_model("claude-haiku-5-5") == ""


async def test_a_workers_sessions_share_one_openai_client(fake_openai: MakeOpenAI):
    fake = fake_openai()
    fake.end_delay = 0.2  # the body ends a moment after [DONE]: the pool keeps it all the same
    shared = llm.SharedModelClient()
    first, second = shared.llm(), shared.llm()
    try:
        assert isinstance(first, OpenAICompatibleLLM) and first.chat is second.chat
        fake.enqueue(Reply(text="One."), Reply(text="Two."))
        await first.stream([{"role": "user", "content": "Hi"}], system="s")
        await first.close()  # a session's close leaves the pool open for the others
        reply = await second.stream([{"role": "user", "content": "Hi"}], system="s")
        assert reply.text == "Two." and fake.connections_opened == 1
    finally:
        await shared.aclose()


async def test_a_connection_dropped_after_done_still_gives_the_whole_reply(
    fake_openai: MakeOpenAI,
):
    fake = fake_openai()
    fake.drop_after_done = True  # [DONE], then the connection ends without the body's end
    model = LLM.from_settings()
    try:
        fake.enqueue(Reply(text="Whole."), Reply(text="Again."))
        reply = await model.stream([{"role": "user", "content": "Hi"}], system="s")
        assert reply.text == "Whole." and len(fake.requests) == 1  # not asked again
    finally:
        await model.close()


async def test_a_body_held_open_after_done_costs_its_connection_not_the_reply(
    fake_openai: MakeOpenAI, monkeypatch: pytest.MonkeyPatch
):
    fake = fake_openai()
    fake.end_delay = 3.0  # the server sends [DONE], then keeps the body open
    monkeypatch.setattr(openai_chat, "DRAIN_SECONDS", 0.2)
    shared = llm.SharedModelClient()
    model = shared.llm()
    try:
        fake.enqueue(Reply(text="One."), Reply(text="Two."))
        first = await model.stream([{"role": "user", "content": "Hi"}], system="s")
        second = await model.stream([{"role": "user", "content": "Hi"}], system="s")
        # Both replies whole; the first connection was dropped, not waited on for 3 s.
        assert (first.text, second.text) == ("One.", "Two.")
        assert fake.connections_opened == 2
    finally:
        await shared.aclose()
