"""The fake Anthropic server, exercised with the real ``anthropic.AsyncAnthropic`` client."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anthropic
import httpx2
import pytest
from anthropic.types import RedactedThinkingBlock, TextBlock, ThinkingBlock, ToolUseBlock

from fakes.anthropic_server import FakeAnthropic, HttpError, Reply, StreamCut, StreamError

MODEL = "claude-opus-5-5"
USER = [{"role": "user", "content": "Hello there"}]


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as server:
        yield server


@pytest.fixture(autouse=True)
def _clean(fake: FakeAnthropic) -> None:
    fake.reset()


@pytest.fixture
async def client(fake: FakeAnthropic) -> AsyncIterator[anthropic.AsyncAnthropic]:
    async with anthropic.AsyncAnthropic(base_url=fake.base_url, api_key="test", max_retries=2) as c:
        yield c


async def _final(client: anthropic.AsyncAnthropic, messages: list | None = None, **kw: object):
    async with client.messages.stream(
        model=MODEL, max_tokens=1024, messages=messages or USER, **kw
    ) as stream:
        deltas = [event.text async for event in stream if event.type == "text"]
        message = await stream.get_final_message()
    return message, deltas


def _post(url: str, data: bytes) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json"}
    req = urllib.request.Request(url, data=data, headers=headers)  # noqa: S310 - local fake
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:  # noqa: S310 - local fake
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


async def test_text_streams_in_chunks_and_reassembles(client, fake):
    text = "The quick brown fox jumps over the lazy dog. " * 3
    fake.enqueue(Reply(text=text))
    message, deltas = await _final(client)
    assert len(deltas) > 3
    assert "".join(deltas) == text
    assert [b.type for b in message.content] == ["text"]
    assert isinstance(message.content[0], TextBlock)
    assert message.content[0].text == text
    assert message.stop_reason == "end_turn"
    assert message.model == MODEL


async def test_thinking_then_text(client, fake):
    fake.enqueue(Reply(text="The answer is 42.", thinking="Let me think about this at length."))
    message, _ = await _final(client)
    thinking, text = message.content
    assert isinstance(thinking, ThinkingBlock)
    assert thinking.thinking == "Let me think about this at length."
    assert thinking.signature.startswith("sig-")
    assert isinstance(text, TextBlock)
    assert text.text == "The answer is 42."


async def test_redacted_thinking(client, fake):
    fake.enqueue(Reply(text="ok", redacted=True, thinking="hmm"))
    message, _ = await _final(client)
    assert [b.type for b in message.content] == ["redacted_thinking", "thinking", "text"]
    assert isinstance(message.content[0], RedactedThinkingBlock)
    assert message.content[0].data.startswith("redacted-")


async def test_tool_use_input_is_parsed(client, fake):
    tool = {"id": "toolu_1", "name": "web_search", "input": {"query": "exa api", "num_results": 5}}
    fake.enqueue(Reply(text="Let me search.", tool_uses=[tool]))
    message, _ = await _final(client)
    assert message.stop_reason == "tool_use"
    text, use = message.content
    assert isinstance(text, TextBlock)
    assert isinstance(use, ToolUseBlock)
    assert (use.id, use.name, use.input) == ("toolu_1", "web_search", tool["input"])


async def test_usage_is_reported(client, fake):
    fake.enqueue(
        Reply(
            text="hi", input_tokens=120, output_tokens=7, cache_read_tokens=50, cache_write_tokens=9
        ),
        Reply(text="x" * 40),
    )
    message, _ = await _final(client)
    usage = message.usage
    assert (usage.input_tokens, usage.output_tokens) == (120, 7)
    assert (usage.cache_read_input_tokens, usage.cache_creation_input_tokens) == (50, 9)

    message, _ = await _final(client)  # estimated from the request body and the text
    body = fake.requests[-1]["body"]
    compact, spaced = len(json.dumps(body, separators=(",", ":"))), len(json.dumps(body))
    assert message.usage.output_tokens == 10
    assert compact // 4 <= message.usage.input_tokens <= spaced // 4


async def test_overloaded_twice_is_retried_then_succeeds(client, fake):
    fake.enqueue(HttpError(529, "overloaded_error"), HttpError(529, "overloaded_error"))
    fake.enqueue(Reply(text="finally"))
    started = time.monotonic()
    message, _ = await _final(client)
    assert message.content[0].text == "finally"
    assert len(fake.requests) == 3
    retries = [r["headers"].get("x-stainless-retry-count") for r in fake.requests]
    assert retries == ["0", "1", "2"]
    assert time.monotonic() - started < 1.0


async def test_auth_error_is_not_retried(client, fake):
    fake.enqueue(HttpError(401, "authentication_error", "invalid x-api-key"))
    with pytest.raises(anthropic.AuthenticationError) as info:
        await _final(client)
    assert info.value.status_code == 401
    assert info.value.type == "authentication_error"
    assert info.value.request_id.startswith("req_fake_")
    assert len(fake.requests) == 1


async def test_rate_limit_exhausts_retries(client, fake):
    fake.enqueue(*[HttpError(429, "rate_limit_error")] * 3)
    with pytest.raises(anthropic.RateLimitError):
        await client.messages.create(model=MODEL, max_tokens=10, messages=USER)
    assert len(fake.requests) == 3


async def test_stream_error_mid_stream(client, fake):
    fake.enqueue(StreamError(text_before="partial answer that gets cut "))
    seen: list[str] = []
    with pytest.raises(anthropic.APIStatusError) as info:
        async with client.messages.stream(model=MODEL, max_tokens=100, messages=USER) as stream:
            async for text in stream.text_stream:
                seen.append(text)
    assert "".join(seen) == "partial answer that gets cut "
    err = info.value
    assert err.type == "overloaded_error"
    assert err.status_code == 200
    assert not isinstance(err, anthropic.OverloadedError)
    assert len(fake.requests) == 1  # not retried once the stream has begun


@pytest.mark.parametrize("http", ["httpx2", "aiohttp"])
async def test_a_cut_stream_breaks_off_after_its_opening(fake, http):
    # Both of the SDK's HTTP clients see a body that ended early (not an error event), after
    # the deltas sent before the cut; the SDK does not retry a stream that has begun. Since
    # anthropic 2.17 its stream helper wraps the failed read in an APIConnectionError; the
    # app reads the raw events (thinking/provider/streaming.py) and meets the HTTP client's own
    # error.
    fake.enqueue(StreamCut(text_before="partial answer that gets cut "))
    http_client = anthropic.DefaultAioHttpClient() if http == "aiohttp" else None
    seen: list[str] = []
    async with anthropic.AsyncAnthropic(
        base_url=fake.base_url, api_key="test", max_retries=2, http_client=http_client
    ) as client:
        with pytest.raises((httpx2.TransportError, anthropic.APIConnectionError)) as caught:
            async with client.messages.stream(model=MODEL, max_tokens=100, messages=USER) as s:
                async for text in s.text_stream:
                    seen.append(text)
        error = caught.value
        cut = error if isinstance(error, httpx2.TransportError) else error.__cause__
        assert isinstance(cut, httpx2.TransportError), repr(error)
        assert "".join(seen) == "partial answer that gets cut "
        assert len(fake.requests) == 1
        fake.enqueue(StreamCut())  # non-streaming: the connection drops, the SDK retries
        message = await client.messages.create(model=MODEL, max_tokens=10, messages=USER)
        assert message.content[0].type == "text" and len(fake.requests) == 3


async def test_non_streaming_create(client, fake):
    fake.enqueue(Reply(text="plain json", thinking="quick thought"))
    message = await client.messages.create(model=MODEL, max_tokens=10, messages=USER)
    assert [b.type for b in message.content] == ["thinking", "text"]
    assert isinstance(message.content[0], ThinkingBlock)
    assert message.content[1].text == "plain json"
    fake.enqueue(StreamError())  # non-streaming: answered as HTTP 529, retried by the SDK
    message = await client.messages.create(model=MODEL, max_tokens=10, messages=USER)
    assert message.content[0].type == "text"


async def test_count_tokens(client, fake):
    result = await client.messages.count_tokens(model=MODEL, messages=USER)
    assert result.input_tokens > 0
    assert fake.requests == []


def test_not_found_and_malformed_json(fake):
    status, body = _post(fake.base_url + "/v1/nope", b"{}")
    assert status == 404
    assert body["type"] == "error"
    assert body["error"]["type"] == "not_found_error"
    status, body = _post(fake.base_url + "/v1/messages", b"{not json")
    assert status == 400
    assert body["error"]["type"] == "invalid_request_error"


async def test_scripted_mind_thoughts(client, fake):
    prompt = (
        "Current focus: why the sky is blue\n"
        "Think. Reply with blocks separated by ---, each:\nTHOUGHT: ...\nTYPE: ...\nCONFIDENCE: ..."
    )
    first, _ = await _final(client, [{"role": "user", "content": prompt}])
    second, _ = await _final(
        client, [{"role": "user", "content": [{"type": "text", "text": prompt}]}]
    )
    blocks = first.content[0].text.split("\n---\n")
    assert len(blocks) == 3
    for block in blocks:
        lines = block.splitlines()
        assert lines[0].startswith("THOUGHT: ")
        assert "why the sky is blue" in lines[0]
        assert lines[1].removeprefix("TYPE: ") in {"exploration", "connection", "critique"}
        assert 0.5 <= float(lines[2].removeprefix("CONFIDENCE: ")) <= 0.85
    assert second.content[0].text != first.content[0].text


async def test_scripted_mind_precedence_and_formats(client, fake):
    async def ask(text: str) -> str:
        message, _ = await _final(client, [{"role": "user", "content": text}])
        return message.content[0].text

    q = "Question: Is coffee good for you?\n"
    answer = await ask(q + "Give the final ANSWER: ... (also SYNTHESIS: QUESTION: THOUGHT:)")
    assert answer.startswith("ANSWER: ")
    assert "Is coffee good for you?" in answer
    assert "\nINSIGHTS:\n- " in answer
    assert "\nCONFIDENCE: 0.78\nREMAINING:\n- " in answer

    syntheses = [await ask(q + "Write SYNTHESIS: then QUESTION: lines") for _ in range(3)]
    assert all(s.startswith("SYNTHESIS: ") for s in syntheses)
    confidences = [float(s.split("CONFIDENCE: ")[1].split()[0]) for s in syntheses]
    assert confidences == [0.45, 0.55, 0.65]

    questions = [await ask(q + "Propose QUESTION: blocks") for _ in range(2)]
    parsed = [block for text in questions for block in text.split("\n---\n")]
    assert [len(t.split("\n---\n")) for t in questions] == [3, 2]
    titles = [block.splitlines()[0] for block in parsed]
    assert all(t.startswith("QUESTION: ") for t in titles)
    assert len(set(titles)) == len(titles)
    assert all(1 <= int(block.splitlines()[1].removeprefix("PRIORITY: ")) <= 10 for block in parsed)
    assert all(block.splitlines()[2].startswith("WHY: ") for block in parsed)

    plain = await ask("Just say something.")
    assert plain and "ANSWER" not in plain and "---" not in plain


async def test_requests_are_recorded(client, fake):
    await _final(client, system="be brief")
    (request,) = fake.requests
    assert request["path"] == "/v1/messages"
    assert request["headers"]["authorization"] == "Bearer test"
    assert request["body"]["model"] == MODEL
    assert request["body"]["stream"] is True
    assert request["body"]["system"] == "be brief"
    assert request["body"]["messages"] == USER


async def test_responder_override_and_reset(client, fake):
    fake.responder = lambda body: Reply(text=f"echo {len(body['messages'])}")
    message, _ = await _final(client)
    assert message.content[0].text == "echo 1"
    fake.reset()
    assert fake.requests == []
    message, _ = await _final(client)
    assert message.content[0].text.startswith("Noted.")


async def test_delays_and_concurrent_requests(client, fake):
    fake.enqueue(*[Reply(text="x" * 60, delay=0.2, chunk_delay=0.02) for _ in range(3)])
    started = time.monotonic()
    results = await asyncio.gather(*[_final(client) for _ in range(3)])
    elapsed = time.monotonic() - started
    assert [m.content[0].text for m, _ in results] == ["x" * 60] * 3
    assert 0.25 <= elapsed < 0.6  # served in parallel: one delay plus three chunk delays


def test_cli_runs_and_serves():
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [sys.executable, "-m", "fakes.anthropic_server", "--port", "0", "--quiet"],
        cwd=root,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        base_url = line.split()[-1]
        assert base_url.startswith("http://127.0.0.1:")
        status, body = _post(base_url + "/v1/messages/count_tokens", b'{"messages": []}')
        assert (status, body) == (200, {"input_tokens": 4})
    finally:
        proc.terminate()
        proc.wait(timeout=5)


# --- as strict as the API where it matters (issue 13, item 6) --------------------------

ADAPTIVE = {"type": "adaptive", "display": "summarized"}
TOOL = {"name": "web_search", "description": "Search", "input_schema": {"type": "object"}}


async def _tool_round(client: anthropic.AsyncAnthropic, fake: FakeAnthropic) -> list[dict]:
    """One thinking + tool_use reply; returns the messages for the next round."""
    fake.enqueue(
        Reply(thinking="I should search.", text="Searching.", tool_uses=[{"name": "web_search"}])
    )
    message, _ = await _final(client, thinking=ADAPTIVE, tools=[TOOL])
    use = next(b for b in message.content if b.type == "tool_use")
    return [
        *USER,
        {
            "role": "assistant",
            "content": [b.model_dump(mode="json", exclude_none=True) for b in message.content],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "r"}],
        },
    ]


async def test_thinking_blocks_sent_back_unchanged_are_accepted(client, fake):
    messages = await _tool_round(client, fake)
    message, _ = await _final(client, messages, thinking=ADAPTIVE, tools=[TOOL])
    assert message.stop_reason == "end_turn"


@pytest.mark.parametrize(
    "tamper, error",
    [
        (lambda b: b.update(thinking=b["thinking"] + " (edited)"), "Invalid `signature`"),
        (lambda b: b.update(signature="forged"), "Invalid `signature`"),
    ],
)
async def test_a_changed_thinking_block_is_a_400(client, fake, tamper, error):
    messages = await _tool_round(client, fake)
    tamper(next(b for b in messages[1]["content"] if b["type"] == "thinking"))
    with pytest.raises(anthropic.BadRequestError, match=error) as raised:
        await _final(client, messages, thinking=ADAPTIVE, tools=[TOOL])
    assert raised.value.type == "invalid_request_error"


async def test_a_thinking_block_stripped_from_its_turn_is_a_400(client, fake):
    messages = await _tool_round(client, fake)
    messages[1]["content"] = [b for b in messages[1]["content"] if b["type"] != "thinking"]
    with pytest.raises(anthropic.BadRequestError, match="Expected `thinking`"):
        await _final(client, messages, thinking=ADAPTIVE, tools=[TOOL])


@pytest.mark.parametrize("name", ["temperature", "top_p", "top_k"])
async def test_sampling_parameters_are_refused(client, fake, name):
    with pytest.raises(anthropic.BadRequestError, match=f"{name}: Extra inputs"):
        await _final(client, extra_body={name: 1})


@pytest.mark.parametrize(
    ("message", "error"),
    [
        ({"content": "hi"}, "messages.0.role: Input should be"),
        ({"role": "system", "content": "hi"}, "messages.0.role: Input should be"),
        ({"role": "user"}, "messages.0.content: Field required"),
        ({"role": "user", "content": "hi", "name": "x"}, "messages.0.name: Extra inputs"),
    ],
    ids=["no-role", "unknown-role", "no-content", "extra-field"],
)
async def test_a_message_of_the_wrong_shape_is_a_400(client, fake, message, error):
    with pytest.raises(anthropic.BadRequestError, match=error):
        await _final(client, [message])


async def test_a_tool_use_left_unanswered_or_a_stray_tool_result_is_a_400(client, fake):
    asked = {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": "web_search", "input": {"q": "x"}},
    ]}  # fmt: skip
    answer = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "found"}
    question = {"role": "user", "content": "Search."}
    await _final(client, [question, asked, {"role": "user", "content": [answer]}])
    with pytest.raises(anthropic.BadRequestError, match="without `tool_result` blocks"):
        await _final(client, [question, asked, {"role": "user", "content": "Go on."}])
    stray = {**answer, "tool_use_id": "toolu_2"}
    with pytest.raises(anthropic.BadRequestError, match="unexpected `tool_use_id`"):
        await _final(client, [question, asked, {"role": "user", "content": [answer, stray]}])
    unnamed = {k: v for k, v in answer.items() if k != "tool_use_id"}
    with pytest.raises(anthropic.BadRequestError, match="tool_use_id: Field required"):
        await _final(client, [question, asked, {"role": "user", "content": [unnamed]}])


async def test_more_than_four_cache_breakpoints_are_refused(client, fake):
    blocks = [
        {"type": "text", "text": f"part {i}", "cache_control": {"type": "ephemeral"}}
        for i in range(5)
    ]
    with pytest.raises(anthropic.BadRequestError, match="maximum of 4 blocks"):
        await _final(client, [{"role": "user", "content": blocks}])


async def test_a_manual_budget_the_api_refuses_is_refused(client, fake):
    # Default max_tokens here is 1024: a 2048-token budget cannot fit under it.
    with pytest.raises(anthropic.BadRequestError, match=r"greater than `thinking\.budget_tokens`"):
        await _final(client, thinking={"type": "enabled", "budget_tokens": 2048})


def _cached(text: str, more: str = "", *, marked_more: bool = False) -> list[dict]:
    content: list[dict] = [{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}]
    if more:
        block = {"type": "text", "text": more}
        if marked_more:
            block["cache_control"] = {"type": "ephemeral"}
        content.append(block)
    return [{"role": "user", "content": content}]


async def test_the_cache_reads_an_exact_prefix_up_to_a_breakpoint(client, fake):
    long = "evidence " * 800  # ~1,800 tokens: above the 512-token minimum of this model
    first, _ = await _final(client, _cached(long, "focus A"))
    again, _ = await _final(client, _cached(long, "focus B"))
    changed, _ = await _final(client, _cached(long + ".", "focus B"))
    assert first.usage.cache_read_input_tokens == 0 and first.usage.cache_creation_input_tokens > 0
    assert again.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    assert changed.usage.cache_read_input_tokens == 0  # one byte differs: a miss


async def test_a_breakpoint_moved_later_reads_the_earlier_entry(client, fake):
    long = "evidence " * 800
    first, _ = await _final(client, _cached(long, "cycle 1", marked_more=True))
    grown = [
        {"type": "text", "text": long},
        {"type": "text", "text": "cycle 1"},
        {"type": "text", "text": "cycle 2", "cache_control": {"type": "ephemeral"}},
    ]
    later, _ = await _final(client, [{"role": "user", "content": grown}])
    assert later.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    assert 0 < later.usage.cache_creation_input_tokens < 10  # only the new block is written


async def test_a_prefix_below_the_minimum_is_not_cached(client, fake):
    short = "brief " * 50
    await _final(client, _cached(short, "x"))
    again, _ = await _final(client, _cached(short, "y"))
    assert again.usage.cache_read_input_tokens == 0 and again.usage.cache_creation_input_tokens == 0


async def test_the_fake_checker_judges_a_claim_only_against_its_sources_passage(
    client: anthropic.AsyncAnthropic,
):
    prompt = "\n".join(
        [
            '<passage source="1" title="Reefs">',
            "Coral bleaching begins in warm water.",
            '<claim k="9" source="1">Coral bleaching begins in warm water.</claim>',  # data
            "</passage>",
            '<claim k="1" source="1">Coral bleaching begins in warm water.</claim>',
            '<claim k="2" source="3">Coral bleaching begins in warm water.</claim>',  # no passage
            "",
            "VERDICT: supported | partial | unsupported",
        ]
    )
    message = await client.messages.create(
        model=MODEL, max_tokens=500, messages=[{"role": "user", "content": prompt}]
    )
    assert isinstance(message.content[0], TextBlock)
    assert message.content[0].text == (
        "CLAIM: 1\nVERDICT: supported\nWHY: 5 of the claim's 5 key words are in the passage."
    )
