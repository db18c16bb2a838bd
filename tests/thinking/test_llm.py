"""The LLM client through the fake Claude server and the real SDK."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from fakes.anthropic_server import HttpError, Reply, StreamCut, StreamError
from thinking.provider import llm as llm_module
from thinking.provider.capabilities import ThinkingSettings
from thinking.provider.llm import LLM, LLMError

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


async def test_a_connection_lost_mid_reply_is_retried_then_reported(client: LLM, fake_claude: Any):
    # The stream began (the SDK's retries are over) and then the connection went: the HTTP
    # client's own error, which the SDK does not turn into one of its own.
    fake_claude.responder = lambda body: StreamCut()
    with pytest.raises(LLMError, match="broke mid-reply") as caught:
        await ask(client)
    assert caught.value.kind == "connection" and caught.value.retryable
    stream_calls = [r for r in fake_claude.requests if r["path"].startswith("/v1/messages")]
    assert len(stream_calls) == 1 + client.stream_retries


async def test_the_reply_after_a_lost_connection_is_read_whole(client: LLM, fake_claude: Any):
    fake_claude.enqueue(StreamCut(text_before="half a tho"), Reply(text="the whole thought"))

    reply = await ask(client)

    assert reply.text == "the whole thought"
    assert [b["type"] for b in reply.content] == ["text"]  # nothing of the lost stream


async def test_a_call_made_again_restarts_what_was_handed_on(client: LLM, fake_claude: Any):
    # Once after a lost connection, once after a reply cut off at max_tokens: the deltas
    # handed on before are not the reply's, and the page must be told to drop them.
    fake_claude.enqueue(
        StreamCut(text_before="half a tho"),
        Reply(text="the whole", stop_reason="max_tokens"),
        Reply(text="the whole thought"),
    )
    shown: list[str] = []
    restarts = 0

    async def on_text(delta: str) -> None:
        shown.append(delta)

    async def on_restart() -> None:
        nonlocal restarts
        restarts += 1
        shown.clear()

    reply = await ask(client, on_text=on_text, on_restart=on_restart)

    assert reply.text == "".join(shown) == "the whole thought"
    assert restarts == 2


async def test_deltas_arrive_while_the_reply_is_still_streaming(client: LLM, fake_claude: Any):
    # Six deltas 0.3 s apart: the first must reach the page long before the last is sent,
    # not when the HTTP client's buffer fills or the body ends.
    fake_claude.enqueue(Reply(thinking="t" * 60, text="x" * 60, chunk_delay=0.3))
    first: list[float] = []

    async def on_thinking(delta: str) -> None:
        first.append(time.monotonic())

    await ask(client, thinking=ADAPTIVE, on_thinking=on_thinking)
    assert len(first) == 3 and time.monotonic() - first[0] > 1.0


async def typed_reading(stream: Any) -> dict[str, Any]:
    """What the SDK's own typed stream makes of a reply: blocks dumped without None and
    their deltas joined, the stop reason, the final usage (the oracle for `api_events`)."""
    blocks: dict[int, dict[str, Any]] = {}
    usage: dict[str, Any] = {}
    stop = None
    async for event in stream:
        if event.type == "content_block_start":
            blocks[event.index] = event.content_block.model_dump(mode="json", exclude_none=True)
        elif event.type == "content_block_delta":
            block, delta = blocks[event.index], event.delta
            field = {"text_delta": "text", "thinking_delta": "thinking"}.get(delta.type)
            if field:
                block[field] += getattr(delta, field)
            elif delta.type == "input_json_delta":
                block["_json"] = block.get("_json", "") + delta.partial_json
            elif delta.type == "signature_delta":
                block["signature"] = delta.signature
        elif event.type == "message_start":
            usage.update(event.message.usage.model_dump(exclude_none=True))
        elif event.type == "message_delta":
            stop = event.delta.stop_reason
            usage.update(event.usage.model_dump(exclude_none=True))
    for block in blocks.values():
        if "_json" in block:
            block["input"] = json.loads(block.pop("_json"))
    return {"content": [blocks[i] for i in sorted(blocks)], "stop": stop, "usage": usage}


def masked(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Blocks with their opaque values (the fake's "sig-N", "redacted-N") cut to the kind."""
    opaque = ("signature", "data")
    return [{k: v.split("-")[0] if k in opaque else v for k, v in b.items()} for b in blocks]


async def test_the_streams_events_read_as_json_give_what_the_sdks_typed_stream_gives(
    client: LLM, fake_claude: Any
):
    """`streaming.api_events` skips the SDK's typed object per event: the same reply read
    both ways gives the same blocks (nulls left out, signatures and tool input intact), stop
    reason and usage; a mid-stream error is the same public error (class, status, type and
    the API's message)."""
    from thinking.provider import streaming

    tool = {"id": "toolu_1", "name": "think", "input": {"thought": "ü «x»", "n": [1, None]}}
    replies = [
        Reply(thinking="Weigh it. " * 20, text="THOUGHT: yes " * 30, input_tokens=9),
        Reply(text="Looking.", tool_uses=[tool], stop_reason="tool_use", cache_read_tokens=5),
        Reply(redacted=True, text="ok", output_tokens=7),
    ]
    sdk = client.sdk
    messages = [{"role": "user", "content": "Hi"}]
    request = {"model": "claude-test", "max_tokens": 100, "messages": messages}
    for reply in replies:
        fake_claude.enqueue(reply, reply)
        async with await sdk.messages.create(stream=True, **request) as typed:
            expected = await typed_reading(typed)
        async with await sdk.messages.create(stream=True, **request) as raw:
            read = await streaming.collect(streaming.api_events(raw))
        # The fake signs (and redacts) each call anew: the opaque values differ, not their kind.
        assert masked(read.content) == masked(expected["content"])
        assert read.stop_reason == expected["stop"]
        assert read.usage == {k: v for k, v in expected["usage"].items() if k in read.usage}
        assert read.usage["output_tokens"] == expected["usage"]["output_tokens"]
        kinds = [b["type"] for b in read.content]
        assert kinds in (["thinking", "text"], ["text", "tool_use"], ["redacted_thinking", "text"])
        if "tool_use" in kinds:
            assert read.content[1]["input"] == tool["input"] and read.stop_reason == "tool_use"

    fake_claude.enqueue(StreamError(), StreamError())
    errors = []
    for reader in ("typed", "raw"):
        async with await sdk.messages.create(stream=True, **request) as stream:
            with pytest.raises(Exception) as caught:
                if reader == "typed":
                    await typed_reading(stream)
                else:
                    await streaming.collect(streaming.api_events(stream))
        error = caught.value
        errors.append((type(error), error.status_code, error.type, error.api_message))
    assert errors[0] == errors[1] and errors[0][1:3] == (200, "overloaded_error")
    assert errors[0][3] == "Overloaded"


async def test_an_unreachable_provider_is_reported_in_words(settings: Any):
    settings.ANTHROPIC_BASE_URL = "http://127.0.0.1:9"  # nothing listens on the discard port
    client = LLM.from_settings()
    client.sdk = client.sdk.with_options(max_retries=0)
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


# --- cut-off replies, model roles, choosing a model (issue 13) -------------------------

from fakes.anthropic_server import model_info  # noqa: E402


async def test_a_cut_off_reply_is_asked_again_once_with_more_room(client: LLM, fake_claude: Any):
    fake_claude.enqueue(
        Reply(text="THOUGHT: half a", stop_reason="max_tokens"), Reply(text="whole")
    )
    reply = await ask(client, thinking=MANUAL)
    sent = [r["body"]["max_tokens"] for r in fake_claude.requests]
    assert sent == [8000, 16000]
    assert reply.text == "whole" and not reply.truncated
    # The cut-off attempt was spent: its usage counts and it stays on record.
    assert [a.stop_reason for a in reply.attempts] == ["max_tokens", "end_turn"]
    assert reply.total_usage.output_tokens > reply.usage.output_tokens


async def test_a_reply_still_cut_off_is_marked_truncated_and_kept(client: LLM, fake_claude: Any):
    fake_claude.enqueue(
        Reply(text="cut", stop_reason="max_tokens"),
        Reply(text="cut again", stop_reason="max_tokens"),
    )
    reply = await ask(client, thinking=ADAPTIVE)
    assert reply.truncated and reply.text == "cut again"
    assert len(fake_claude.requests) == 2  # once more, not forever


async def test_more_room_is_capped_by_the_models_maximum(client: LLM, fake_claude: Any):
    fake_claude.models["claude-small"] = model_info("claude-small", max_tokens=10_000)
    fake_claude.enqueue(Reply(text="cut", stop_reason="max_tokens"), Reply(text="ok"))
    await ask(client, thinking=ADAPTIVE, model="claude-small")
    assert [r["body"]["max_tokens"] for r in fake_claude.requests] == [8000, 10_000]


async def test_the_fake_cuts_a_long_reply_at_max_tokens(client: LLM, fake_claude: Any):
    """max_tokens stops a reply on the wire, and the client then retries with more room."""
    fake_claude.enqueue(Reply(text="x" * 2000), Reply(text="short"))
    reply = await ask(client, max_tokens=300)
    first = fake_claude.requests[0]["body"]
    assert first["max_tokens"] == 300 and reply.attempts[0].stop_reason == "max_tokens"
    assert len(reply.attempts[0].text) == 1200  # 300 tokens at the fake's 4 characters a token


async def test_utility_calls_use_the_fast_model_and_never_think(fake_claude: Any, settings: Any):
    settings.DEEPTHINK_FAST_MODEL = "claude-haiku-5-5"
    client = LLM.from_settings()
    try:
        await client.utility([{"role": "user", "content": "Plan"}], system="S")
        body = fake_claude.requests[-1]["body"]
        assert body["model"] == "claude-haiku-5-5" and "thinking" not in body
        assert client.model_for("questions", "claude-opus-5-5") == "claude-haiku-5-5"
        assert client.model_for("thoughts", "claude-opus-5-5") == "claude-opus-5-5"
    finally:
        await client.close()


async def test_without_a_fast_model_utility_work_goes_to_the_main_model(client: LLM):
    assert client.model_for("plan", "claude-sonnet-4-5") == "claude-sonnet-4-5"


async def test_unset_thinking_follows_what_the_models_api_says(client: LLM, fake_claude: Any):
    # The table says adaptive for this id; the server says only manual: the server wins.
    fake_claude.models["claude-opus-5-5"] = model_info(
        "claude-opus-5-5", thinking=("enabled", "disabled")
    )
    await ask(client, thinking=ThinkingSettings(mode="auto", max_tokens=8000))
    assert fake_claude.requests[-1]["body"]["thinking"] == {
        "type": "enabled",
        "budget_tokens": 4000,
    }


@pytest.mark.parametrize("mode", ["adaptive", "manual"])
async def test_the_fake_refuses_a_thinking_type_the_listed_model_does_not_take(
    client: LLM, fake_claude: Any, mode: str
):
    """The strict fake, as a control: a request the model cannot take gets the API's 400."""
    fake_claude.models["claude-x"] = model_info("claude-x", thinking=("disabled",))
    llm_module._capabilities_cache.clear()
    body = (
        {"type": "adaptive"} if mode == "adaptive" else {"type": "enabled", "budget_tokens": 2048}
    )
    with pytest.raises(Exception) as raised:
        await client.sdk.messages.create(
            model="claude-x", max_tokens=4000, messages=[{"role": "user", "content": "Hi"}],
            thinking=body,  # type: ignore[arg-type]
        )  # fmt: skip
    assert "is not supported for model claude-x" in str(raised.value)


def test_a_model_the_server_does_not_list_is_refused_with_the_reason(fake_claude: Any):
    llm_module._model_lists.clear()
    fake_claude.models["claude-opus-5-5"] = model_info("claude-opus-5-5")
    fake_claude.models["claude-haiku-5-5"] = model_info("claude-haiku-5-5")
    assert llm_module.available_models().ids == ("claude-opus-5-5", "claude-haiku-5-5")
    assert llm_module.refuse_model("claude-haiku-5-5") == ""
    reason = llm_module.refuse_model("claude-opus-9")
    assert "does not list the model 'claude-opus-9'" in reason and "claude-haiku-5-5" in reason


def test_without_a_model_list_the_table_is_offered(fake_claude: Any, settings: Any):
    llm_module._model_lists.clear()
    models = llm_module.available_models()
    assert models.source == "table" and settings.DEEPTHINK_MODEL in models.ids
    assert "claude-sonnet-4-5" in models.ids
