"""Model replies from the wild, through the fake Claude server and the real SDK: a reply cut
off inside a tool call's JSON (a recorded stream, replayed byte for byte), a stream without
`message_stop`, `error` events mid-stream, block and delta types this client does not read,
and a model the provider does not know."""

from __future__ import annotations

import json
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings

from fakes.anthropic_server import HttpError, RawStream, StreamError, recorded_stream
from fakes.anthropic_server import Reply as FakeReply
from tests.helpers import run
from thinking.deliberation.tools import WEB_SEARCH
from thinking.models import ModelCall, Status
from thinking.provider import llm as llm_module
from thinking.provider.llm import LLM, LLMError, Reply

pytestmark = pytest.mark.django_db(transaction=True)

SEARCH = {"name": "web_search", "input": {"query": "coral bleaching surveys"}}


async def ask(**kwargs: Any) -> Reply:
    """One call through a client of its own, on the fake (its models asked anew)."""
    llm_module._capabilities_cache.clear()
    client = LLM.from_settings()
    try:
        return await client.stream([{"role": "user", "content": "Hi"}], system="S", **kwargs)
    finally:
        await client.close()


def message_calls(fake: Any) -> list[dict]:
    return [r["body"] for r in fake.requests if r["path"].startswith("/v1/messages")]


# --- cut off inside a tool call --------------------------------------------------------------


async def test_a_recorded_tool_call_cut_off_at_max_tokens_is_asked_again(fake_claude: Any):
    fake_claude.enqueue(
        recorded_stream("tool_call_cut_off"), FakeReply(text="On it.", tool_uses=[SEARCH])
    )
    restarts = 0

    async def on_restart() -> None:
        nonlocal restarts
        restarts += 1

    reply = await ask(tools=[WEB_SEARCH], on_restart=on_restart)

    sent = [body["max_tokens"] for body in message_calls(fake_claude)]
    room = settings.DEEPTHINK_MAX_TOKENS
    assert sent == [room, 2 * room]  # asked again with more room
    assert [use["input"] for use in reply.tool_uses] == [SEARCH["input"]]
    assert restarts == 1 and not reply.truncated
    cut = reply.attempts[0]
    assert cut.stop_reason == "max_tokens" and cut.usage.output_tokens == 64
    # What the cut-off attempt said is read; its unfinished call is no call.
    assert cut.text == "I'll look for recent surveys of coral bleaching before I write my thoughts."
    assert cut.tool_uses == []


async def test_a_tool_call_cut_off_twice_is_kept_as_truncated_without_the_call(fake_claude: Any):
    fake_claude.enqueue(recorded_stream("tool_call_cut_off"), recorded_stream("tool_call_cut_off"))
    reply = await ask(tools=[WEB_SEARCH])
    assert reply.truncated and reply.tool_uses == [] and reply.text.startswith("I'll look")
    assert len(message_calls(fake_claude)) == 2


async def test_a_session_whose_tool_call_is_cut_off_asks_again_and_completes(
    fake_claude: Any, make_session: Any
):
    session = await sync_to_async(make_session)(
        budget_seconds=600, synthesis_interval_seconds=600, token_ceiling=6000
    )
    replayed = False

    def cut_first_thoughts(body: dict) -> Any:
        nonlocal replayed
        if body.get("tools") and not replayed:
            replayed = True
            return recorded_stream("tool_call_cut_off")
        return fake_claude.scripted_mind(body)

    fake_claude.responder = cut_first_thoughts
    status = await run(session)

    await session.arefresh_from_db()
    assert replayed and status == Status.COMPLETED, session.error_message
    stops = [c.stop_reason async for c in ModelCall.objects.filter(session=session)]
    assert stops.count("max_tokens") == 1  # the cut-off attempt is on record, then its retry
    assert session.truncated_replies == 0


# --- streams that end early or break off -----------------------------------------------------


async def test_a_stream_without_message_stop_is_asked_again(fake_claude: Any):
    fake_claude.enqueue(
        FakeReply(text="the whole tho", no_message_stop=True), FakeReply(text="whole")
    )
    reply = await ask()
    assert reply.text == "whole" and len(message_calls(fake_claude)) == 2


async def test_a_stream_that_always_ends_early_is_reported_as_retryable(fake_claude: Any):
    fake_claude.responder = lambda body: FakeReply(text="half", no_message_stop=True)
    with pytest.raises(LLMError, match="ended before it was finished") as caught:
        await ask()
    assert caught.value.retryable  # a session waits it out like an outage
    assert len(message_calls(fake_claude)) == 1 + settings.DEEPTHINK_STREAM_RETRIES


async def test_a_tool_input_that_does_not_parse_is_asked_again(fake_claude: Any):
    # The stream says the call is whole (stop_reason tool_use) but its JSON is not.
    broken = recorded_stream("tool_call_cut_off").sse.replace(b'"max_tokens"', b'"tool_use"')
    fake_claude.enqueue(RawStream(broken), FakeReply(tool_uses=[SEARCH]))
    reply = await ask(tools=[WEB_SEARCH])
    assert [use["input"] for use in reply.tool_uses] == [SEARCH["input"]]
    assert len(message_calls(fake_claude)) == 2


RECORDED_ERROR = (
    b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_01","type":'
    b'"message","role":"assistant","model":"claude-opus-5-5","content":[],"stop_reason":null,'
    b'"stop_sequence":null,"usage":{"input_tokens":12,"output_tokens":1}}}\n\n'
    b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
    b'"content_block":{"type":"text","text":""}}\n\n'
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
    b'"delta":{"type":"text_delta","text":"Half a"}}\n\n'
    b'event: error\ndata: {"type":"error","error":{"details":null,"type":"overloaded_error",'
    b'"message":"Overloaded"},"request_id":"req_011CWxyz"}\n\n'
)


@pytest.mark.parametrize(
    "broken",
    [
        RawStream(RECORDED_ERROR),
        StreamError(type="api_error", message="Internal server error"),
        StreamError(type="rate_limit_error"),
        StreamError(type="service_unavailable_error"),  # a type yet to come
        RawStream(RECORDED_ERROR.replace(b'"overloaded_error"', b"null")),  # no type at all
    ],
)
async def test_an_error_event_mid_stream_is_asked_again(fake_claude: Any, broken: Any):
    fake_claude.enqueue(broken, FakeReply(text="whole"))
    shown: list[str] = []

    async def on_text(delta: str) -> None:
        shown.append(delta)

    async def on_restart() -> None:
        shown.clear()

    reply = await ask(on_text=on_text, on_restart=on_restart)
    assert reply.text == "".join(shown) == "whole"
    assert len(message_calls(fake_claude)) == 2


async def test_an_error_event_that_refuses_the_request_is_not_asked_again(fake_claude: Any):
    fake_claude.enqueue(StreamError(type="invalid_request_error", message="prompt too long"))
    with pytest.raises(LLMError, match="rejected the request: prompt too long"):
        await ask()
    assert len(message_calls(fake_claude)) == 1


# --- what this client does not read ----------------------------------------------------------

SERVER_TOOL_BLOCKS = [
    {"type": "server_tool_use", "id": "srvtoolu_01", "name": "web_search", "input": {"query": "x"}},
    {
        "type": "web_search_tool_result",
        "tool_use_id": "srvtoolu_01",
        "content": [
            {
                "type": "web_search_result",
                "url": "https://example.org/reef",
                "title": "Reef",
                "encrypted_content": "EqgfCioIARgBIiQ3",
                "page_age": None,
            }
        ],
    },
    {"type": "text", "text": "Reefs bleach in heat [1]."},
    {"type": "container_upload", "file_id": "file_01"},  # any block type yet to come
]
CITATION = {
    "type": "web_search_result_location",
    "url": "https://example.org/reef",
    "title": "Reef",
    "encrypted_index": "Eo8BCioIAhgBIiQ",
    "cited_text": "Reefs bleach when the water is too warm.",
}


async def test_server_tool_blocks_citations_and_new_types_are_ignored(fake_claude: Any):
    fake_claude.enqueue(
        FakeReply(
            blocks=[*SERVER_TOOL_BLOCKS, {"type": "tool_use", "id": "toolu_1", **SEARCH}],
            extra_deltas=[
                {"type": "citations_delta", "citation": CITATION},
                {"type": "sparkle_delta", "sparkle": 1},
            ],
        )
    )
    reply = await ask(tools=[WEB_SEARCH])
    assert reply.text == "Reefs bleach in heat [1]."
    assert [b["type"] for b in reply.content] == ["text", "tool_use"]
    assert [use["input"] for use in reply.tool_uses] == [SEARCH["input"]]


async def test_unknown_events_are_ignored(fake_claude: Any):
    stream = (
        RECORDED_ERROR.split(b"event: error")[0]
        + b'event: content_block_annotation\ndata: {"type":"content_block_annotation","index":0}'
        b"\n\n" + b'event: content_block_delta\ndata: {"type":"content_block_delta","index":7,'
        b'"delta":{"type":"text_delta","text":"a block that never started"}}\n\n'
        + b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
        + b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn",'
        b'"stop_sequence":null},"usage":{"output_tokens":3}}\n\n'
        + b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
    )
    fake_claude.enqueue(RawStream(stream))
    reply = await ask()
    assert reply.text == "Half a" and reply.stop_reason == "end_turn"
    assert len(message_calls(fake_claude)) == 1


# --- a model the provider does not know ------------------------------------------------------


@pytest.mark.parametrize(
    ("which", "variable"),
    [("main", "DEEPTHINK_MODEL"), ("fast", "DEEPTHINK_FAST_MODEL")],
)
async def test_a_model_not_found_names_its_setting(
    fake_claude: Any, settings: Any, which: str, variable: str
):
    settings.DEEPTHINK_FAST_MODEL = "claude-fast-typo"
    llm_module._capabilities_cache.clear()
    client = LLM.from_settings()
    refused = client.model if which == "main" else client.fast_model

    def respond(body: dict) -> Any:
        if body["model"] == refused:
            return HttpError(404, "not_found_error", f"model: {refused}")
        return FakeReply(text="ok")

    fake_claude.responder = respond
    try:
        with pytest.raises(LLMError) as caught:
            if which == "main":
                await ask()
            else:
                await client.utility([{"role": "user", "content": "Hi"}], system="S")
    finally:
        await client.close()
    assert str(caught.value) == (
        f"The model provider does not know the model {refused!r} (check {variable})."
    )
    other = "DEEPTHINK_FAST_MODEL" if variable == "DEEPTHINK_MODEL" else "DEEPTHINK_MODEL"
    assert other not in str(caught.value) and caught.value.kind == "not_found"


def test_the_recorded_stream_is_in_the_apis_wire_format():
    events = recorded_stream("tool_call_cut_off").sse.decode().split("\n\n")
    names = [e.split("\n")[0] for e in events if e]
    assert names[0] == "event: message_start" and names[-1] == "event: message_stop"
    for event in filter(None, events):
        name, data = event.split("\n")
        assert json.loads(data.removeprefix("data: "))["type"] == name.removeprefix("event: ")
