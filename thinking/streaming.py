"""One assistant message put together from the SDK's raw stream events.

`client.messages.create(stream=True)` yields the API's events as the SDK parses them. The
SDK's `messages.stream()` helper on top of it rebuilds a snapshot of the whole message and a
typed event object for every delta, about half of the client's CPU per call (bench/README,
"The model stream"). Here each block's deltas are kept as strings and joined once, when the
stream ends; the blocks come out as request blocks, values untouched (signatures included),
ready to be sent back inside a tool loop.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

TextCallback = Callable[[str], Awaitable[None]]

# Usage fields a message_delta may carry: cumulative totals that replace message_start's.
_USAGE = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


@dataclass
class StreamedMessage:
    model: str = ""
    content: list[dict[str, Any]] = field(default_factory=list)
    stop_reason: str | None = None
    usage: dict[str, int] = field(default_factory=dict)


async def collect(
    events: AsyncIterable[Any],
    *,
    on_text: TextCallback | None = None,
    on_thinking: TextCallback | None = None,
) -> StreamedMessage:
    """Read the stream to its end, handing text and thinking deltas to the callbacks as
    they arrive. An `error` event mid-stream is raised by the SDK's iterator itself."""
    message = StreamedMessage()
    blocks: dict[int, dict[str, Any]] = {}
    parts: dict[int, list[str]] = {}
    async for event in events:
        kind = event.type
        if kind == "content_block_delta":
            delta = event.delta
            if delta.type == "text_delta":
                parts[event.index].append(delta.text)
                if on_text is not None:
                    await on_text(delta.text)
            elif delta.type == "thinking_delta":
                parts[event.index].append(delta.thinking)
                if on_thinking is not None:
                    await on_thinking(delta.thinking)
            elif delta.type == "input_json_delta":
                parts[event.index].append(delta.partial_json)
            elif delta.type == "signature_delta":
                blocks[event.index]["signature"] = delta.signature
        elif kind == "content_block_start":
            blocks[event.index] = event.content_block.model_dump(mode="json", exclude_none=True)
            parts[event.index] = []
        elif kind == "message_delta":
            message.stop_reason = event.delta.stop_reason
            _take_usage(message.usage, event.usage)
        elif kind == "message_start":
            message.model = event.message.model
            _take_usage(message.usage, event.message.usage)
    message.content = [_finished(blocks[i], parts[i]) for i in sorted(blocks)]
    return message


def _take_usage(usage: dict[str, int], reported: Any) -> None:
    for name in _USAGE:
        value = getattr(reported, name, None)
        if value is not None:
            usage[name] = value


def _finished(block: dict[str, Any], parts: list[str]) -> dict[str, Any]:
    """The block with its streamed deltas joined in (a tool's input JSON parsed)."""
    joined = "".join(parts)
    if not joined:  # a tool's input may stream as one empty delta: its start's {} stands
        return block
    if block["type"] == "text":
        block["text"] = block.get("text", "") + joined
    elif block["type"] == "thinking":
        block["thinking"] = block.get("thinking", "") + joined
    elif "input" in block:  # tool_use and server tool use: the input streams as JSON text
        block["input"] = json.loads(joined)
    return block
