"""OpenAI-compatible Chat Completions: the only module that imports `openai`.

For servers that speak the OpenAI wire protocol rather than Anthropic's (vLLM, LM Studio,
llama.cpp's server, Ollama's /v1, OpenRouter, Groq, DeepSeek). `thinking.provider.llm` keeps the
conversation in the Anthropic shape (content blocks, tool_use / tool_result); this module
turns it into chat messages for the request and turns the streamed chunks back into the same
blocks (`streaming.StreamedMessage`), so the rest of the app never knows which wire was used.

Reasoning models send their reasoning two ways: as `reasoning_content` (vLLM, DeepSeek) or
`reasoning` (OpenRouter, Ollama) deltas beside the text, or inside `<think>…</think>` at the
start of the text (a server without a reasoning parser). Both go to the thinking callback
and to a thinking block, never into the text. The app's own tag formats also ask for a
`<think>` element: when the prompt asks for one, a leading `<think>` block is the format's,
kept in the text, unless another follows it (then the first was the model's own).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any, cast

import httpx2
import openai

from thinking.provider.streaming import StreamedMessage, TextCallback

OPEN, CLOSE = "<think>", "</think>"
# Delta fields that carry a reasoning model's reasoning, by server.
REASONING_FIELDS = ("reasoning_content", "reasoning")
# finish_reason -> the Anthropic stop_reason the app reads.
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


AsyncClient = openai.AsyncOpenAI
SDKError = openai.OpenAIError


class BrokenStream(Exception):
    """A reply that ended in an error chunk after it began: the SDK retries only the
    request, so `thinking.provider.llm` tries the whole call again (as it does a lost
    connection)."""


def new_client(api_key: str, base_url: str) -> openai.AsyncOpenAI:
    """The SDK client on its aiohttp transport (as the Anthropic one), for one worker."""
    return openai.AsyncOpenAI(
        # Local servers need no key, but the SDK insists on one.
        api_key=api_key or "no-key-needed",
        base_url=base_url or None,
        http_client=openai.DefaultAioHttpClient(),
    )


def list_models(api_key: str, base_url: str) -> tuple[str, ...]:
    """The ids the server lists (GET /models); raises `openai.OpenAIError` if it cannot."""
    with openai.OpenAI(
        api_key=api_key or "no-key-needed", base_url=base_url or None, max_retries=0, timeout=5
    ) as client:
        return tuple(model.id for model in client.models.list())


# --- the request ---------------------------------------------------------------------------


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n\n".join(
        block.get("text", "")
        for block in content or []
        if isinstance(block, dict) and block.get("type") == "text"
    )


def chat_messages(system: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Anthropic-shaped turns as chat messages: the system prompt first, each tool_result as
    a `tool` message, an assistant's tool_use blocks as its `tool_calls`. Thinking blocks
    are not sent back (reasoning servers refuse or ignore them); prompt-cache marks go."""
    out: list[dict[str, Any]] = [{"role": "system", "content": system}]
    for message in messages:
        content = message.get("content")
        blocks = content if isinstance(content, list) else []
        if message.get("role") == "assistant":
            turn: dict[str, Any] = {"role": "assistant", "content": _text_of(content) or None}
            calls = [
                {
                    "id": block.get("id", ""),
                    "type": "function",
                    "function": {
                        "name": block.get("name", ""),
                        "arguments": json.dumps(block.get("input") or {}),
                    },
                }
                for block in blocks
                if isinstance(block, dict) and block.get("type") == "tool_use"
            ]
            if calls:
                turn["tool_calls"] = calls
            out.append(turn)
            continue
        for block in blocks:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                result = block.get("content")
                text = _text_of(result) if not isinstance(result, str) else result
                if block.get("is_error"):
                    text = f"Error: {text}"
                out.append(
                    {"role": "tool", "tool_call_id": block.get("tool_use_id", ""), "content": text}
                )
        text = _text_of(content)
        if text or not blocks:
            out.append({"role": "user", "content": text})
    return out


def chat_tools(tools: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Anthropic tool definitions as function tools."""
    return [
        {
            "type": "function",
            "function": {
                "name": tool["name"],
                "description": tool.get("description", ""),
                "parameters": tool.get("input_schema") or {"type": "object", "properties": {}},
            },
        }
        for tool in tools
    ]


def asks_for_think_tags(messages: list[dict[str, Any]]) -> bool:
    """Whether the prompt itself asks for a `<think>` element (the tag formats)."""
    return any(OPEN in _text_of(m.get("content")) for m in messages if m.get("role") == "user")


# --- reasoning inside the text --------------------------------------------------------------


_LEADING = re.compile(r"\s*<think>(.*?)(?:</think>|\Z)\s*", re.DOTALL)


def split_reasoning(text: str, *, format_think: bool) -> tuple[str, str]:
    """(reasoning, text): a leading `<think>…</think>` block is the model's reasoning (an
    unclosed one, cut off, is all reasoning). When the prompt asked for a `<think>` element
    (`format_think`) the leading block is the format's, unless another `<think>` follows."""
    found = _LEADING.match(text)
    if found is None:
        return "", text
    rest = text[found.end() :]
    if format_think and not rest.startswith(OPEN):
        return "", text
    return found.group(1).strip(), rest


@dataclass
class _LiveSplit:
    """Routes streamed text to the page as it comes: what is inside a leading `<think>` to
    the thinking callback, the rest to the text callback. Only for the live view; what is
    stored is decided on the whole reply (`split_reasoning`)."""

    on_text: TextCallback | None
    on_thinking: TextCallback | None
    raw: list[str] = field(default_factory=list)
    _seen: str = ""
    _state: str = "start"  # start -> think -> text
    _sent: int = 0

    async def feed(self, delta: str) -> None:
        self.raw.append(delta)
        self._seen += delta
        if self._state == "start":
            head = self._seen.lstrip()
            if len(head) < len(OPEN) and OPEN.startswith(head):
                return  # too early to tell
            if head.startswith(OPEN):
                self._state, self._sent = "think", self._seen.index(OPEN) + len(OPEN)
            else:
                self._state = "text"
        if self._state == "think":
            end = self._seen.find(CLOSE, self._sent)
            upto = end if end >= 0 else max(self._sent, len(self._seen) - len(CLOSE))
            await self._hand(self.on_thinking, self._seen[self._sent : upto])
            self._sent = upto
            if end < 0:
                return
            self._state, self._sent = "text", end + len(CLOSE)
        await self._hand(self.on_text, self._seen[self._sent :])
        self._sent = len(self._seen)

    @staticmethod
    async def _hand(callback: TextCallback | None, text: str) -> None:
        if text and callback is not None:
            await callback(text)


# --- the call ------------------------------------------------------------------------------


@dataclass
class _Call:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)

    def block(self, n: int) -> dict[str, Any]:
        try:
            parsed = json.loads("".join(self.arguments) or "{}")
        except ValueError:
            parsed = None  # the tool reads it as no input and answers with an error
        return {
            "type": "tool_use",
            "id": self.id or f"call_{n}",
            "name": self.name,
            "input": parsed if isinstance(parsed, dict) else {},
        }


# After `[DONE]`, how long the rest of the body may take to end before its connection is
# dropped instead of handed back to the pool.
DRAIN_SECONDS = 5.0


async def chunks(response: Any) -> AsyncIterator[dict[str, Any]]:
    """The JSON chunks of a streamed reply (the SDK's raw response, read by its public
    `iter_lines`): one `data:` line each, up to `[DONE]`. Plain dicts, not a typed object per
    chunk, which took three times the CPU of the Anthropic wire's reading (each delta is a
    chunk of its own). An error chunk raises BrokenStream."""
    lines = response.iter_lines()
    async for line in lines:
        if not line.startswith("data:"):
            continue  # comments (": keep-alive"), event names, blank separators
        data = line[5:].strip()
        if data == "[DONE]":
            await _drain(lines)
            return
        chunk = json.loads(data)
        if isinstance(chunk, dict) and chunk.get("error"):
            error = chunk["error"]
            words = error.get("message") if isinstance(error, dict) else error
            raise BrokenStream(str(words or "an error chunk"))
        if isinstance(chunk, dict):
            yield chunk


async def _drain(lines: AsyncIterator[str]) -> None:
    """Read the body to its end, as the SDK's own stream does after `[DONE]`: a response
    closed before the server's last bytes arrive takes its connection with it instead of
    handing it back to the pool. A server that holds the body open gets DRAIN_SECONDS, and
    one that drops the connection instead of ending the body loses only its connection: the
    reply is whole either way."""
    with contextlib.suppress(TimeoutError, httpx2.TransportError):
        async with asyncio.timeout(DRAIN_SECONDS):
            async for _ in lines:
                pass


async def stream(
    client: openai.AsyncOpenAI,
    messages: list[dict[str, Any]],
    *,
    model: str,
    system: str,
    max_tokens: int,
    tools: list[dict[str, Any]] | None,
    on_text: TextCallback | None = None,
    on_thinking: TextCallback | None = None,
) -> StreamedMessage:
    """One streamed chat completion, as the Anthropic-shaped message `thinking.provider.llm` reads.
    Errors before the reply begins are the SDK's (which retries them); an error chunk after
    raises BrokenStream, a connection lost the HTTP client's own error."""
    live = _LiveSplit(on_text, on_thinking)
    reasoning: list[str] = []
    calls: dict[int, _Call] = {}
    message = StreamedMessage(model=model)
    # The chat messages and tools are the SDK's TypedDicts, built here as plain dicts.
    async with client.chat.completions.with_streaming_response.create(
        model=model,
        messages=cast("Any", chat_messages(system, messages)),
        max_tokens=max_tokens,
        stream=True,
        stream_options={"include_usage": True},
        tools=cast("Any", chat_tools(tools)) if tools else openai.omit,
    ) as response:
        async for chunk in chunks(response):
            message.model = chunk.get("model") or message.model
            if chunk.get("usage"):
                message.usage = _usage(chunk["usage"])
            for choice in chunk.get("choices") or ():
                if choice.get("finish_reason"):
                    reason = choice["finish_reason"]
                    message.stop_reason = STOP_REASONS.get(reason, reason)
                delta = choice.get("delta") or {}
                thought = next(
                    (v for name in REASONING_FIELDS if isinstance(v := delta.get(name), str)), ""
                )
                if thought:
                    reasoning.append(thought)
                    if on_thinking is not None:
                        await on_thinking(thought)
                if delta.get("content"):
                    await live.feed(delta["content"])
                for call in delta.get("tool_calls") or ():
                    into = calls.setdefault(call.get("index", 0), _Call())
                    into.id = call.get("id") or into.id
                    function = call.get("function") or {}
                    into.name = function.get("name") or into.name
                    into.arguments.append(function.get("arguments") or "")
    said, text = split_reasoning("".join(live.raw), format_think=asks_for_think_tags(messages))
    thinking = "\n\n".join(part for part in ("".join(reasoning).strip(), said) if part)
    content: list[dict[str, Any]] = []
    if thinking:
        content.append({"type": "thinking", "thinking": thinking})
    if text or not calls:
        content.append({"type": "text", "text": text})
    content += [calls[i].block(i) for i in sorted(calls)]
    if calls and message.stop_reason == "end_turn":
        message.stop_reason = "tool_use"  # some servers say "stop" after tool calls
    message.content = content
    return message


def _usage(usage: dict[str, Any]) -> dict[str, int]:
    """Chat usage in the Anthropic fields: input tokens exclude those read from a cache."""
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return {
        "input_tokens": max(0, (usage.get("prompt_tokens") or 0) - cached),
        "output_tokens": usage.get("completion_tokens") or 0,
        "cache_read_input_tokens": cached,
    }


# --- errors --------------------------------------------------------------------------------


def error_words(error: BaseException) -> tuple[str, str, bool] | None:
    """(kind, words a person can act on, retryable) for this SDK's errors; None for others."""
    if isinstance(error, BrokenStream):
        return "connection", "The reply from the model server broke off.", True
    if not isinstance(error, openai.OpenAIError):
        return None
    if isinstance(error, openai.AuthenticationError):
        return "auth", "The model server refused the API key (check OPENAI_API_KEY).", False
    if isinstance(error, openai.PermissionDeniedError):
        return "permission", "The API key may not use this model.", False
    if isinstance(error, openai.NotFoundError):
        return (
            "not_found",
            "The model server does not know this model (check DEEPTHINK_MODEL and "
            "OPENAI_BASE_URL).",
            False,
        )
    if isinstance(error, openai.RateLimitError):
        return "rate_limited", "The model server is rate limiting us.", True
    if isinstance(error, openai.APITimeoutError):
        # Also a refused connection, on the SDK's aiohttp client.
        return "timeout", "The model server did not answer (check OPENAI_BASE_URL).", True
    if isinstance(error, openai.APIConnectionError):
        return (
            "connection",
            "Could not reach the model server (network or OPENAI_BASE_URL).",
            True,
        )
    if isinstance(error, openai.APIStatusError):
        if error.status_code == 400 or error.status_code == 422:
            return "bad_request", f"The model server rejected the request: {error.message}", False
        if error.status_code >= 500:
            return "server", "The model server had an internal error.", True
        status = error.status_code
        return "other", f"The model server answered with an error (HTTP {status}).", False
    return None
