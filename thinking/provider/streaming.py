"""One assistant message put together from the API's stream events.

`client.messages.create(stream=True)` sends the request (retries and HTTP errors are the
SDK's) and returns the event stream. The SDK's `messages.stream()` helper on top of it
rebuilds a snapshot of the whole message and a typed event for every delta; iterating the
stream itself still builds one typed object per event. Both were most of the client's CPU
per call (the benchmark diary, `git show 1a29a6f^:bench/README.md`, "The model stream" and
"The stream's events as JSON"). Here the events are read with the SDK's public SSE decoder
(`AsyncStream.raw_events`) and each one's JSON taken as it is; an `error` event is raised as
the SDK's public `APIStatusError`, with the stream's status (200) and the event's error type
and message. A stream that ends before `message_stop` raises IncompleteStream (asked again,
like a lost connection); a tool call cut off inside its JSON by max_tokens is left out (the
reply is asked again with more room); blocks and deltas of types this client does not read
(server tools, citations, whatever comes next) are ignored. Each block's deltas are kept as
strings and joined once, when the stream ends; the blocks come out as request blocks, values
untouched (signatures included), ready to be sent back inside a tool loop.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anthropic

TextCallback = Callable[[str], Awaitable[None]]
# Called before a call is made again, so what was handed on can start over.
RestartCallback = Callable[[], Awaitable[None]]

# Usage fields a message_delta may carry: cumulative totals that replace message_start's.
_USAGE = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


@dataclass
class StreamedMessage:
    model: str = ""
    content: list[dict[str, Any]] = field(default_factory=list)
    stop_reason: str | None = None
    usage: dict[str, int] = field(default_factory=dict)


async def api_events(stream: anthropic.AsyncStream[Any]) -> AsyncIterator[dict[str, Any]]:
    """The events of a streamed reply, each the JSON object the API sent, as the SDK's own
    stream reads them (pings and nameless events skipped) but without a typed object per
    event. An `error` event mid-stream raises `anthropic.APIStatusError` with the stream's
    status (200); its `type` and `api_message` are the event's, as the SDK's own iterator
    gives them."""
    response = stream.response
    async for sse in anthropic.AsyncStream.raw_events(response):
        if sse.event is None or sse.event == "ping":
            continue
        if sse.event == "error":
            try:
                body: object = json.loads(sse.data)
            except ValueError:
                body = sse.data
            message = sse.data or f"Error code: {response.status_code}"
            raise anthropic.APIStatusError(message, response=response, body=body)
        if sse.data:
            yield json.loads(sse.data)


class IncompleteStream(Exception):
    """A stream that ended before its message did: no `message_stop`, or a tool call's input
    that does not parse in a reply that was not cut off at max_tokens. Worth asking again,
    as a connection lost mid-reply is."""


# The blocks a reply is made of here. Others (a server tool's use and result, anything new)
# are left out of the reply, their deltas with them, so a tool loop never sends back a
# block this client did not ask for; so are delta types it does not read (citations).
KNOWN_BLOCKS = frozenset({"text", "thinking", "redacted_thinking", "tool_use"})


async def collect(
    events: AsyncIterable[dict[str, Any]],
    *,
    on_text: TextCallback | None = None,
    on_thinking: TextCallback | None = None,
) -> StreamedMessage:
    """Read the stream's events (`api_events`) to the end, handing text and thinking deltas
    to the callbacks as they arrive. Raises IncompleteStream when the stream ends early."""
    message = StreamedMessage()
    blocks: dict[int, dict[str, Any]] = {}
    parts: dict[int, list[str]] = {}
    stopped = False
    async for event in events:
        kind = event.get("type")
        if kind == "content_block_delta":
            delta, index = event.get("delta") or {}, event.get("index")
            if index not in parts:  # a block left out, or one that never started
                continue
            delta_type = delta.get("type")
            if delta_type == "text_delta":
                parts[index].append(delta["text"])
                if on_text is not None:
                    await on_text(delta["text"])
            elif delta_type == "thinking_delta":
                parts[index].append(delta["thinking"])
                if on_thinking is not None:
                    await on_thinking(delta["thinking"])
            elif delta_type == "input_json_delta":
                parts[index].append(delta["partial_json"])
            elif delta_type == "signature_delta":
                blocks[index]["signature"] = delta["signature"]
        elif kind == "content_block_start":
            # A null field is left out, as the SDK's typed block dumped without None was.
            block = event.get("content_block") or {}
            if block.get("type") in KNOWN_BLOCKS:
                blocks[event["index"]] = {k: v for k, v in block.items() if v is not None}
                parts[event["index"]] = []
        elif kind == "message_delta":
            message.stop_reason = (event.get("delta") or {}).get("stop_reason")
            _take_usage(message.usage, event.get("usage"))
        elif kind == "message_start":
            started = event.get("message") or {}
            message.model = started.get("model", "")
            _take_usage(message.usage, started.get("usage"))
        elif kind == "message_stop":
            stopped = True
    if not stopped:
        raise IncompleteStream("the stream ended before its message_stop event")
    cut_off = message.stop_reason == "max_tokens"
    finished = (_finished(blocks[i], parts[i], cut_off=cut_off) for i in sorted(blocks))
    message.content = [block for block in finished if block is not None]
    return message


def _take_usage(usage: dict[str, int], reported: dict[str, Any] | None) -> None:
    for name in _USAGE:
        value = (reported or {}).get(name)
        if value is not None:
            usage[name] = value


def _finished(block: dict[str, Any], parts: list[str], *, cut_off: bool) -> dict[str, Any] | None:
    """The block with its streamed deltas joined in (a tool's input JSON parsed). A tool
    call whose input a reply cut off at max_tokens left unfinished is no call: None."""
    joined = "".join(parts)
    if not joined:  # a tool's input may stream as one empty delta: its start's {} stands
        return block
    if block["type"] == "text":
        block["text"] = block.get("text", "") + joined
    elif block["type"] == "thinking":
        block["thinking"] = block.get("thinking", "") + joined
    elif "input" in block:  # the input streams as JSON text
        try:
            block["input"] = json.loads(joined)
        except ValueError:
            if cut_off:
                return None
            raise IncompleteStream("a tool call's input ended before its JSON did") from None
    return block
