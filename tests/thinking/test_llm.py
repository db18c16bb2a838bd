"""The LLM client through the fake Claude server and the real SDK."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.fakes.anthropic_server import HttpError, Reply, StreamError
from thinking import llm as llm_module
from thinking.capabilities import ThinkingSettings
from thinking.llm import LLM, LLMError

pytestmark = pytest.mark.django_db(transaction=True)

MANUAL = ThinkingSettings(mode="manual", budget_tokens=2048, max_tokens=8000)
ADAPTIVE = ThinkingSettings(mode="adaptive", max_tokens=8000)


@pytest.fixture
async def client(fake_claude: Any) -> Any:
    llm_module._capabilities_cache.clear()
    client = LLM.from_settings()
    yield client
    await client.close()


async def ask(client: LLM, **kwargs: Any) -> Any:
    return await client.stream([{"role": "user", "content": "Hi"}], system="S", **kwargs)


async def test_thinking_then_text_streams_both(client: LLM, fake_claude: Any):
    fake_claude.enqueue(Reply(thinking="Let me see... 27*453.", text="12,231"))
    seen: list[str] = []

    async def on_thinking(delta: str) -> None:
        seen.append(delta)

    reply = await ask(client, thinking=ADAPTIVE, on_thinking=on_thinking)

    assert reply.text == "12,231"
    assert reply.thinking == "Let me see... 27*453." == "".join(seen)
    assert [b["type"] for b in reply.content] == ["thinking", "text"]
    assert reply.content[0]["signature"].startswith("sig-")


async def test_redacted_thinking_is_kept_opaque(client: LLM, fake_claude: Any):
    fake_claude.enqueue(Reply(redacted=True, text="ok"))
    reply = await ask(client, thinking=ADAPTIVE)
    assert reply.redacted_blocks == 1 and reply.thinking == ""
    assert reply.content[0] == {"type": "redacted_thinking", "data": reply.content[0]["data"]}


async def test_a_tool_loop_sends_the_streamed_blocks_back_identical_and_in_order(
    client: LLM, fake_claude: Any
):
    streamed = [
        {"type": "thinking", "thinking": "First, plan.", "signature": "sig-a=="},
        {"type": "text", "text": "Let me look that up."},
        {"type": "thinking", "thinking": "Search the web.", "signature": "sig-b=="},
        {"type": "tool_use", "id": "toolu_1", "name": "web_search", "input": {"q": "x", "n": 3}},
    ]
    fake_claude.enqueue(Reply(blocks=streamed), Reply(text="Done."))
    tools = [{"name": "web_search", "input_schema": {"type": "object"}}]
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Find x"}]

    first = await client.stream(messages, system="S", tools=tools, thinking=MANUAL)
    messages += [
        {"role": "assistant", "content": first.content},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "found"}],
        },
    ]
    await client.stream(messages, system="S", tools=tools, thinking=MANUAL)

    sent_back = fake_claude.requests[-1]["body"]["messages"][1]["content"]
    assert json.dumps(sent_back, sort_keys=True) == json.dumps(streamed, sort_keys=True)
    first_body, second_body = (r["body"] for r in fake_claude.requests[-2:])
    assert first_body["system"] == second_body["system"] and first_body["tools"] == tools
    assert first.tool_uses == [streamed[3]]


async def test_manual_thinking_with_tools_sends_the_interleaved_beta(client: LLM, fake_claude: Any):
    client.model = "claude-sonnet-4-6"
    fake_claude.enqueue(Reply(text="ok"))
    await ask(client, thinking=MANUAL, tools=[{"name": "t", "input_schema": {"type": "object"}}])
    request = fake_claude.requests[-1]
    assert request["headers"]["anthropic-beta"] == "interleaved-thinking-2025-05-14"
    assert request["body"]["thinking"] == {"type": "enabled", "budget_tokens": 2048}


async def test_capabilities_come_from_the_models_api_when_the_server_has_it(
    client: LLM, fake_claude: Any
):
    client.model = "claude-future-9"
    fake_claude.models["claude-future-9"] = {
        "type": "model",
        "id": "claude-future-9",
        "display_name": "Future",
        "created_at": "2026-11-01T00:00:00Z",
        "lifecycle": "active",
        "max_tokens": 50_000,
        "capabilities": _capabilities(adaptive=True, enabled=False, effort=["low", "high"]),
    }
    fake_claude.enqueue(Reply(text="ok"))
    await ask(client, thinking=ThinkingSettings(mode="manual", budget_tokens=2048, effort="low"))
    body = fake_claude.requests[-1]["body"]
    assert body["thinking"] == {"type": "adaptive", "display": "summarized"}
    assert body["output_config"] == {"effort": "low"}


async def test_without_a_models_api_the_table_decides(client: LLM, fake_claude: Any):
    client.model = "qwen3:32b"  # a local server's model: manual thinking is safe
    fake_claude.enqueue(Reply(text="ok"))
    await ask(client, thinking=ADAPTIVE)
    assert fake_claude.requests[-1]["body"]["thinking"]["type"] == "enabled"


async def test_no_sampling_parameters_are_ever_sent(client: LLM, fake_claude: Any):
    fake_claude.enqueue(Reply(text="ok"))
    await ask(client, thinking=ADAPTIVE)
    assert not {"temperature", "top_p", "top_k"} & set(fake_claude.requests[-1]["body"])


@pytest.mark.parametrize(
    ("error", "words"),
    [
        (HttpError(status=401, type="authentication_error"), "refused the API key"),
        (HttpError(status=429, type="rate_limit_error"), "rate limiting"),
        (HttpError(status=529, type="overloaded_error"), "overloaded"),
        (HttpError(status=400, type="invalid_request_error", message="bad"), "rejected"),
    ],
)
async def test_errors_that_survive_retries_are_in_words(
    client: LLM, fake_claude: Any, error: HttpError, words: str
):
    fake_claude.responder = lambda body: error
    with pytest.raises(LLMError, match=words):
        await ask(client)


async def test_a_mid_stream_error_is_retried_then_reported(client: LLM, fake_claude: Any):
    fake_claude.responder = lambda body: StreamError()
    with pytest.raises(LLMError, match="overloaded"):
        await ask(client)
    stream_calls = [r for r in fake_claude.requests if r["path"].startswith("/v1/messages")]
    assert len(stream_calls) == 1 + client.stream_retries


async def test_an_unreachable_provider_is_reported_in_words(settings: Any):
    settings.ANTHROPIC_BASE_URL = "http://127.0.0.1:9"  # nothing listens on the discard port
    client = LLM.from_settings()
    client._client = client._client.with_options(max_retries=0)
    try:
        with pytest.raises(LLMError, match="Could not reach the model provider"):
            await ask(client)
    finally:
        await client.close()


def _capabilities(*, adaptive: bool, enabled: bool, effort: list[str]) -> dict:
    yes = {"supported": True}
    no = {"supported": False}
    return {
        "batch": no,
        "citations": no,
        "code_execution": no,
        "context_management": {"supported": False},
        "effort": {
            "supported": bool(effort),
            **{
                level: (yes if level in effort else no)
                for level in ("low", "medium", "high", "max")
            },
        },
        "image_input": no,
        "pdf_input": no,
        "server_tools": {"supported": False},
        "structured_outputs": no,
        "thinking": {
            "supported": True,
            "types": {
                "adaptive": yes if adaptive else no,
                "enabled": yes if enabled else no,
                "disabled": yes,
                "between_tools": no,
            },
        },
    }
