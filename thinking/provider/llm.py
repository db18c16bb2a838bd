"""Model access: the only module that imports `anthropic` (the OpenAI-compatible wire is
`thinking.provider.openai_chat`, used by `OpenAICompatibleLLM` here; DEEPTHINK_PROVIDER picks).

One call shape: `await llm.stream(messages, system=..., on_text=...) -> Reply`. Calls always
stream (long replies would time out otherwise). The SDK retries errors that happen before a
stream starts; an `error` event inside a stream surfaces as an APIStatusError with status 200,
and a connection lost mid-reply as the HTTP client's own error; the SDK retries neither, so
those retries live here. Errors that survive become LLMError with a sentence a person can
act on.

The SDK's HTTP client runs on aiohttp (the SDK's `DefaultAioHttpClient`): its C parser reads
a streamed reply for about half the CPU of the default pure-Python stack (the benchmark
diary, `git show 1a29a6f^:bench/README.md`, "The model client on aiohttp").
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, cast

import anthropic
import httpx2
from anthropic import AsyncStream
from anthropic.types import CacheControlEphemeralParam, RawMessageStreamEvent, TextBlockParam
from django.conf import settings

from thinking.provider import openai_chat, streaming
from thinking.provider.capabilities import (
    Capabilities,
    ThinkingSettings,
    build_request,
    from_models_api,
)
from thinking.provider.capabilities import builtin_capabilities as table_capabilities
from thinking.provider.streaming import RestartCallback, TextCallback

logger = logging.getLogger(__name__)


# Error types that are worth trying again when they arrive mid-stream.
RETRYABLE_STREAM_ERRORS = {"overloaded_error", "api_error", "rate_limit_error", "timeout_error"}
# Error types that say the request itself is wrong: not asked again even mid-stream.
FINAL_STREAM_ERRORS = {
    "invalid_request_error",
    "authentication_error",
    "billing_error",
    "permission_error",
    "not_found_error",
    "request_too_large",
}

NOT_CONFIGURED = (
    "No model provider is configured. Set ANTHROPIC_API_KEY, or ANTHROPIC_BASE_URL for a "
    "local Anthropic-compatible server; or DEEPTHINK_PROVIDER=openai with OPENAI_BASE_URL "
    "(and OPENAI_API_KEY if the server needs one); and restart."
)


class LLMError(Exception):
    """A model call that failed for good; `str(error)` is fit to show a person."""

    def __init__(self, message: str, *, kind: str = "error", retryable: bool = False) -> None:
        super().__init__(message)
        self.kind = kind
        self.retryable = retryable


class LLMNotConfigured(LLMError):
    def __init__(self) -> None:
        super().__init__(NOT_CONFIGURED, kind="not_configured")


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
        )


@dataclass
class Reply:
    text: str
    # The assistant content exactly as streamed (thinking with its signature, redacted
    # thinking, text and tool_use blocks, in order), for passing back unmodified inside a
    # tool loop. Server-side only: signatures must never reach a browser or an export.
    content: list[dict[str, Any]] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    stop_reason: str | None = None
    model: str = ""
    thinking: str = ""  # the (summarized) thinking text, safe to show
    redacted_blocks: int = 0  # thinking the provider redacted: shown as a placeholder
    thinking_mode: str = "off"  # what the request actually asked for
    duration_ms: int = 0
    # Still cut off by max_tokens after the one retry with more room: parse what is there,
    # never treat it as whole.
    truncated: bool = False
    # Earlier attempts that were cut off (their tokens were spent and are counted too).
    cut_off: list[Reply] = field(default_factory=list)

    @property
    def tool_uses(self) -> list[dict[str, Any]]:
        return [block for block in self.content if block.get("type") == "tool_use"]

    @property
    def total_usage(self) -> Usage:
        """This reply's usage plus its cut-off attempts'."""
        return sum((r.usage for r in self.cut_off), self.usage)

    @property
    def attempts(self) -> list[Reply]:
        """Every call behind this reply, oldest first (one ModelCall row each)."""
        return [*self.cut_off, self]


# A 400 that says the server does not take a feature, by feature: Ollama's "does not support
# tools" / "does not support thinking", vLLM's "tool choice requires
# --enable-auto-tool-choice", llama.cpp's "tools param requires --jinja".
_REFUSALS = {
    name: re.compile(
        rf"\b{words}\b[^.]*\b(not supported|unsupported|not enabled|not available|requires)\b"
        rf"|\b(does not|doesn't|do not|cannot|can't) (support|accept|use)\w*\b[^.]*\b{words}\b",
        re.IGNORECASE,
    )
    for name, words in (
        ("tools", r"(tools?|tool[ _]choice|function calling)"),
        ("thinking", r"(thinking|reasoning)"),
    )
}
# What servers refused, by (address, model): (when, features). Kept as long as capabilities.
_refused: dict[tuple[str, str], tuple[float, frozenset[str]]] = {}


def refused_features(key: tuple[str, str]) -> frozenset[str]:
    """The features (tools, thinking) the server at this address refused for this model."""
    found = _refused.get(key)
    if found is None or time.monotonic() - found[0] >= CAPABILITIES_TTL:
        return frozenset()
    return found[1]


def refused_feature(error: LLMError, offered: set[str]) -> str | None:
    """Which of the features sent the server's refusal names, if it is one."""
    if error.kind != "bad_request":
        return None
    for feature in sorted(offered):
        if _REFUSALS[feature].search(str(error)):
            return feature
    return None


# Call kinds that are utility work: the fast model, never thinking.
UTILITY_PURPOSES = frozenset({"plan", "questions", "rerank", "check"})
# A cut-off reply is asked again with this much more room (capped by the model's maximum).
RETRY_ROOM_FACTOR = 2


# Capabilities by (base URL, model), for an hour: one Models API call per worker, not per step.
_capabilities_cache: dict[tuple[str, str], tuple[float, Capabilities]] = {}
CAPABILITIES_TTL = 3600.0


def provider_settings() -> tuple[str, str, str]:
    """(provider, API key, base URL) of the configured provider (DEEPTHINK_PROVIDER)."""
    if settings.DEEPTHINK_PROVIDER == "openai":
        return "openai", settings.OPENAI_API_KEY, settings.OPENAI_BASE_URL
    return "anthropic", settings.ANTHROPIC_API_KEY, settings.ANTHROPIC_BASE_URL


def is_configured() -> bool:
    _provider, key, url = provider_settings()
    return bool(key or url)


def describe_error(error: Exception) -> LLMError:
    """Turn an SDK exception into words a person can act on."""
    if isinstance(error, LLMError):
        return error
    words = openai_chat.error_words(error)
    if words is not None:
        kind, message, retryable = words
        return LLMError(message, kind=kind, retryable=retryable)
    if isinstance(error, anthropic.AuthenticationError):
        return LLMError(
            "The model provider refused the API key (check ANTHROPIC_API_KEY).", kind="auth"
        )
    if isinstance(error, anthropic.PermissionDeniedError):
        return LLMError("The API key may not use this model.", kind="permission")
    if isinstance(error, anthropic.NotFoundError):
        return LLMError(
            f"The model provider does not know the model {settings.DEEPTHINK_MODEL!r} "
            "(check DEEPTHINK_MODEL).",
            kind="not_found",
        )
    if isinstance(error, anthropic.RateLimitError):
        return LLMError(
            "The model provider is rate limiting us; try again shortly.",
            kind="rate_limited",
            retryable=True,
        )
    if isinstance(error, anthropic.APIStatusError):
        error_type = getattr(error, "type", None) or ""
        if error_type == "overloaded_error" or error.status_code == 529:
            return LLMError("The model provider is overloaded.", kind="overloaded", retryable=True)
        if error_type == "rate_limit_error":
            return LLMError(
                "The model provider is rate limiting us.", kind="rate_limited", retryable=True
            )
        if error.status_code == 400 or error_type == "invalid_request_error":
            detail = getattr(error, "api_message", None) or "invalid request"
            return LLMError(
                f"The model provider rejected the request: {detail}", kind="bad_request"
            )
        if error.status_code >= 500 or error_type in RETRYABLE_STREAM_ERRORS:
            return LLMError(
                "The model provider had an internal error.", kind="server", retryable=True
            )
        if error.status_code == 200 and error_type not in FINAL_STREAM_ERRORS:
            # An `error` event once the reply had begun, of a type not named above.
            return LLMError(
                f"The model provider's reply broke off with an error ({error_type or 'untyped'}).",
                kind="server",
                retryable=True,
            )
        return LLMError(
            f"The model provider answered with an error (HTTP {error.status_code}).", kind="other"
        )
    if isinstance(error, anthropic.APITimeoutError):
        return LLMError("The model provider timed out.", kind="timeout", retryable=True)
    if isinstance(error, anthropic.APIConnectionError):
        return LLMError(
            "Could not reach the model provider (network or ANTHROPIC_BASE_URL).",
            kind="connection",
            retryable=True,
        )
    # The HTTP client's own errors come only once a reply has begun: before that, the SDK
    # raises them as its APITimeoutError and APIConnectionError (above).
    if isinstance(error, streaming.IncompleteStream):
        return LLMError(
            "The model provider's reply ended before it was finished.",
            kind="incomplete",
            retryable=True,
        )
    if isinstance(error, httpx2.TimeoutException):
        return LLMError(
            "The model provider stopped answering mid-reply.", kind="timeout", retryable=True
        )
    if isinstance(error, httpx2.TransportError):
        return LLMError(
            "The connection to the model provider broke mid-reply.",
            kind="connection",
            retryable=True,
        )
    if isinstance(error, TypeError) and "authentication" in str(error).lower():
        return LLMNotConfigured()
    logger.exception("Unexpected error from the model client", exc_info=error)
    return LLMError("The model call failed unexpectedly.", kind="unexpected")


def _new_client(api_key: str, base_url: str) -> anthropic.AsyncAnthropic:
    # ~30 ms of CPU (mostly the TLS context of its pool): a worker builds one, and its
    # sessions share the pool. The SDK's aiohttp client, with the SDK's timeouts, limits
    # and proxy settings: see the module's docstring.
    return anthropic.AsyncAnthropic(
        # Local servers (Ollama, vLLM) need no key, but the SDK insists on one.
        api_key=api_key or "no-key-needed",
        base_url=base_url or None,
        http_client=anthropic.DefaultAioHttpClient(),
    )


class LLM:
    """A streaming client for one model. Create one per event loop and close it; or, in a
    worker, one per session from a `SharedModelClient`, which lends them its one connection
    pool (then `close()` leaves the pool open for the other sessions)."""

    def __init__(
        self,
        *,
        model: str,
        max_tokens: int,
        fast_model: str = "",
        api_key: str = "",
        base_url: str = "",
        stream_retries: int = 3,
        retry_base_seconds: float = 1.0,
        client: Any = None,
    ) -> None:
        if not (api_key or base_url):
            raise LLMNotConfigured()
        self.model = model
        # Utility work (plan, sub-questions, re-ranking, checks); empty: the main model.
        self.fast_model = fast_model
        self.max_tokens = max_tokens
        self.stream_retries = stream_retries
        self.retry_base_seconds = retry_base_seconds
        self._owns_client = client is None
        self._connect(client, api_key, base_url)

    def _connect(self, client: Any, api_key: str, base_url: str) -> None:
        # The Anthropic SDK client every call goes through (a worker's, when lent).
        self.sdk: anthropic.AsyncAnthropic = (
            client if client is not None else _new_client(api_key, base_url)
        )

    @property
    def address(self) -> str:
        """The server this client talks to (what a server refused is remembered by it)."""
        return str(self.sdk.base_url)

    @classmethod
    def from_settings(cls, *, client: Any = None) -> LLM:
        """A client for the configured provider and model (DEEPTHINK_PROVIDER: an
        `OpenAICompatibleLLM` for "openai"); on `client`'s pool when given (borrowed: the
        caller closes it), else on its own."""
        provider, api_key, base_url = provider_settings()
        # A subclass (a test's, or OpenAICompatibleLLM's own) builds itself; the base picks
        # the class for the configured wire.
        kind = OpenAICompatibleLLM if cls is LLM and provider == "openai" else cls
        return kind(
            model=settings.DEEPTHINK_MODEL,
            fast_model=settings.DEEPTHINK_FAST_MODEL,
            max_tokens=settings.DEEPTHINK_MAX_TOKENS,
            api_key=api_key,
            base_url=base_url,
            stream_retries=settings.DEEPTHINK_STREAM_RETRIES,
            retry_base_seconds=settings.DEEPTHINK_RETRY_BASE_SECONDS,
            client=client,
        )

    async def close(self) -> None:
        if self._owns_client:
            await self.sdk.close()

    async def capabilities(self, model: str | None = None) -> Capabilities:
        """From the Models API when the server has it (cached); else the built-in table."""
        model = model or self.model
        key = (str(self.sdk.base_url), model)
        cached = _capabilities_cache.get(key)
        if cached and time.monotonic() - cached[0] < CAPABILITIES_TTL:
            return cached[1]
        try:
            info = await self.sdk.with_options(max_retries=0, timeout=10).models.retrieve(model)
            found = from_models_api(info) or table_capabilities(model)
        except (anthropic.AnthropicError, TypeError, ValueError):
            # Local servers (Ollama, vLLM) have no Models API: use what we know.
            found = table_capabilities(model)
        _capabilities_cache[key] = (time.monotonic(), found)
        return found

    async def stream(
        self,
        messages: list[dict[str, Any]],
        *,
        system: str,
        max_tokens: int | None = None,
        thinking: ThinkingSettings | None = None,
        skip_thinking: bool = False,
        tools: list[dict[str, Any]] | None = None,
        on_text: TextCallback | None = None,
        on_thinking: TextCallback | None = None,
        on_restart: RestartCallback | None = None,
        model: str | None = None,
    ) -> Reply:
        """Stream one assistant message (with `model`, or this client's default).

        Retries errors that arrive mid-stream with backoff; raises LLMError when the call
        fails for good. `on_restart` is awaited before a call is made again (after such an
        error, or a reply cut off at max_tokens): the deltas handed on so far are not part of
        the reply. `system` and `tools` are sent as given, so a tool loop that passes the
        same ones keeps the prompt cache and its thinking blocks valid.

        A server that refuses tool definitions or thinking (a local model without them) is
        asked again without; that is remembered for the server and model, so later calls
        leave them out from the start (the tool loop then ends at once: the plan's research
        stands in for the model's searches)."""
        model = model or self.model
        key = (self.address, model)
        refused = refused_features(key)
        try:
            return await self._stream_fitted(
                messages,
                system=system,
                max_tokens=max_tokens,
                thinking=thinking,
                skip_thinking=skip_thinking or "thinking" in refused,
                tools=None if "tools" in refused else tools,
                on_text=on_text,
                on_thinking=on_thinking,
                on_restart=on_restart,
                model=model,
            )
        except LLMError as error:
            offered = {"tools"} if tools else set()
            if not skip_thinking:
                offered.add("thinking")
            feature = refused_feature(error, offered - refused)
            if feature is None:
                raise
        logger.warning("%s refuses %s for %s: asking without", self.address, feature, model)
        _refused[key] = (time.monotonic(), refused | {feature})
        return await self.stream(
            messages,
            system=system,
            max_tokens=max_tokens,
            thinking=thinking,
            skip_thinking=skip_thinking,
            tools=tools,
            on_text=on_text,
            on_thinking=on_thinking,
            on_restart=on_restart,
            model=model,
        )

    async def _stream_fitted(
        self,
        messages: list[dict[str, Any]],
        *,
        system: str,
        max_tokens: int | None,
        thinking: ThinkingSettings | None,
        skip_thinking: bool,
        tools: list[dict[str, Any]] | None,
        on_text: TextCallback | None,
        on_thinking: TextCallback | None,
        on_restart: RestartCallback | None,
        model: str,
    ) -> Reply:
        """`stream` with the request fitted to the model, and a cut-off reply asked again."""
        wanted = thinking or ThinkingSettings(max_tokens=max_tokens or self.max_tokens)
        if thinking is not None and max_tokens:
            wanted = replace(wanted, max_tokens=max_tokens)
        caps = await self.capabilities(model)
        call = partial(
            self._stream_retrying,
            messages,
            model=model,
            system=system,
            tools=tools,
            on_text=on_text,
            on_thinking=on_thinking,
            on_restart=on_restart,
        )
        request = build_request(wanted, caps, tools=bool(tools), skip_thinking=skip_thinking)
        reply = await call(request=request)
        if reply.stop_reason != "max_tokens":
            return reply
        # Cut off: ask again once with more room. Thinking cannot be continued by prefill,
        # so the whole call is repeated; the cut-off attempt's tokens still count.
        sent = request.params["max_tokens"]
        room = sent * RETRY_ROOM_FACTOR
        if caps.max_tokens:
            room = min(room, caps.max_tokens)
        if room <= sent:
            reply.truncated = True
            return reply
        logger.info("Reply cut off at %d tokens; asking again with %d", sent, room)
        if on_restart is not None:
            await on_restart()
        bigger = build_request(
            replace(wanted, max_tokens=room), caps, tools=bool(tools), skip_thinking=skip_thinking
        )
        retry = await call(request=bigger)
        retry.cut_off = [reply]
        retry.truncated = retry.stop_reason == "max_tokens"
        return retry

    async def utility(
        self,
        messages: list[dict[str, Any]],
        *,
        system: str,
        main_model: str | None = None,
        max_tokens: int | None = None,
        on_text: TextCallback | None = None,
    ) -> Reply:
        """A utility call (plan, sub-question list, re-ranking, a check): the fast model
        (DEEPTHINK_FAST_MODEL, else `main_model`, else this client's model), never thinking,
        with the same cut-off retry as `stream`."""
        return await self.stream(
            messages,
            system=system,
            max_tokens=max_tokens,
            skip_thinking=True,
            model=self.model_for("check", main_model),
            on_text=on_text,
        )

    def model_for(self, purpose: str, main_model: str | None = None) -> str:
        """Which model does a call of this purpose: utility work goes to the fast model."""
        main = main_model or self.model
        if purpose in UTILITY_PURPOSES:
            return self.fast_model or main
        return main

    async def _stream_retrying(
        self,
        messages: list[dict[str, Any]],
        *,
        request: Any,
        model: str,
        system: str,
        tools: list[dict[str, Any]] | None,
        on_text: TextCallback | None,
        on_thinking: TextCallback | None,
        on_restart: RestartCallback | None,
    ) -> Reply:
        attempt = 0
        while True:
            try:
                return await self._stream_once(
                    messages,
                    model=model,
                    system=system,
                    params=request.params,
                    headers=request.headers,
                    thinking_mode=request.thinking,
                    tools=tools,
                    on_text=on_text,
                    on_thinking=on_thinking,
                )
            except anthropic.APIStatusError as error:
                mid_stream = error.status_code == 200
                error_type = getattr(error, "type", None) or ""
                # An `error` event once the reply began is asked again unless it says the
                # request itself is wrong (a type yet to come, or none, is asked again too).
                retryable = mid_stream and error_type not in FINAL_STREAM_ERRORS
                if retryable and attempt < self.stream_retries:
                    attempt = await self._back_off(attempt, error_type, on_restart)
                    continue
                raise self._describe_for_model(error, model) from error
            except (
                httpx2.TransportError,
                openai_chat.BrokenStream,
                streaming.IncompleteStream,
            ) as error:
                # The connection was lost (or went quiet), or the stream ended early, after
                # the reply began: the SDK's retries cover only the request and its headers.
                if attempt < self.stream_retries:
                    attempt = await self._back_off(attempt, type(error).__name__, on_restart)
                    continue
                raise describe_error(error) from error
            except anthropic.AnthropicError as error:
                raise self._describe_for_model(error, model) from error
            except TypeError as error:
                # The SDK raises TypeError when it cannot resolve any credentials.
                raise describe_error(error) from error

    def _describe_for_model(self, error: Exception, model: str) -> LLMError:
        """`describe_error`, naming the setting of the model the provider does not know."""
        if not isinstance(error, anthropic.NotFoundError):
            return describe_error(error)
        if model == self.model:
            where = "check DEEPTHINK_MODEL"
        elif model == self.fast_model:
            where = "check DEEPTHINK_FAST_MODEL"
        else:
            where = "the model chosen for this session; pick another"
        return LLMError(
            f"The model provider does not know the model {model!r} ({where}).", kind="not_found"
        )

    async def _back_off(self, attempt: int, what: str, on_restart: RestartCallback | None) -> int:
        """Wait before trying a failed stream again; the next attempt's number."""
        delay = self.retry_base_seconds * (2**attempt)
        logger.warning("Stream error %s; retry %d in %.1fs", what, attempt + 1, delay)
        if on_restart is not None:
            await on_restart()
        await asyncio.sleep(delay)
        return attempt + 1

    async def _stream_once(
        self,
        messages: list[dict[str, Any]],
        *,
        model: str,
        system: str,
        params: dict[str, Any],
        headers: dict[str, str],
        thinking_mode: str,
        tools: list[dict[str, Any]] | None,
        on_text: TextCallback | None,
        on_thinking: TextCallback | None,
    ) -> Reply:
        started = time.monotonic()
        extra: dict[str, Any] = {}
        if tools:
            extra["tools"] = tools
        if headers:
            extra["extra_headers"] = headers
        # The raw events, not the `messages.stream()` helper: see thinking/provider/streaming.py.
        created = await self.sdk.messages.create(
            model=model,
            system=system_blocks(system),
            messages=cache_tool_loop(messages, system_marked=settings.DEEPTHINK_PROMPT_CACHING),  # type: ignore[arg-type]
            stream=True,
            **params,
            **extra,
        )
        # `stream=True` returns the event stream; with **params mypy cannot pick the overload.
        stream = cast("AsyncStream[RawMessageStreamEvent]", created)
        async with stream:
            events = streaming.api_events(stream)
            final = await streaming.collect(events, on_text=on_text, on_thinking=on_thinking)
        return reply_of(final, thinking_mode=thinking_mode, started=started)


def reply_of(final: streaming.StreamedMessage, *, thinking_mode: str, started: float) -> Reply:
    """The Reply for a message streamed by either wire (content in the Anthropic shape)."""
    usage, content = final.usage, final.content
    return Reply(
        text="".join(block["text"] for block in content if block["type"] == "text"),
        content=content,
        usage=Usage(
            input_tokens=usage.get("input_tokens", 0),
            output_tokens=usage.get("output_tokens", 0),
            cache_read_tokens=usage.get("cache_read_input_tokens", 0),
            cache_write_tokens=usage.get("cache_creation_input_tokens", 0),
        ),
        stop_reason=final.stop_reason,
        model=final.model,
        thinking="\n\n".join(
            block["thinking"] for block in content if block["type"] == "thinking"
        ).strip(),
        redacted_blocks=sum(1 for block in content if block["type"] == "redacted_thinking"),
        thinking_mode=thinking_mode,
        duration_ms=round((time.monotonic() - started) * 1000),
    )


# What an OpenAI-compatible model takes: no thinking settings (a reasoning model reasons on
# its own, and its reasoning is read from the stream), no output limit known.
OPENAI_CAPABILITIES = Capabilities(frozenset(), source="openai")


class OpenAICompatibleLLM(LLM):
    """The same client over an OpenAI-compatible Chat Completions server (DEEPTHINK_PROVIDER
    =openai): the wire is `thinking.provider.openai_chat`; replies come back as the same `Reply`,
    with the model's reasoning as its thinking, never in its text."""

    def _connect(self, client: Any, api_key: str, base_url: str) -> None:
        self.chat: openai_chat.AsyncClient = (
            client if client is not None else openai_chat.new_client(api_key, base_url)
        )

    @property
    def address(self) -> str:
        return str(self.chat.base_url)

    async def close(self) -> None:
        if self._owns_client:
            await self.chat.close()

    async def capabilities(self, model: str | None = None) -> Capabilities:
        return OPENAI_CAPABILITIES

    async def _stream_once(
        self,
        messages: list[dict[str, Any]],
        *,
        params: dict[str, Any],
        thinking_mode: str,
        **call: Any,
    ) -> Reply:
        # `call`: model, system, tools and the callbacks; no thinking parameters or headers
        # (the capabilities ask for none). A reply that breaks off raises BrokenStream,
        # which `_stream_retrying` asks again; other errors are final.
        started = time.monotonic()
        del call["headers"]
        try:
            final = await openai_chat.stream(
                self.chat, messages, max_tokens=params["max_tokens"], **call
            )
        except openai_chat.SDKError as error:
            raise describe_error(error) from error
        return reply_of(final, thinking_mode=thinking_mode, started=started)


class SharedModelClient:
    """One Anthropic client, and so one connection pool, for all the sessions of a worker.

    Building a client costs ~30 ms of CPU; with 50-100 sessions starting at once that was
    seconds before any model call, and no session reused another's connections. `llm()`
    hands each session its own `LLM` (model ids, limits and retry settings read from the
    settings as it starts) on the shared pool. The pool is built on first use and belongs to
    that event loop (httpx connections cannot move between loops); `aclose()` when the worker
    stops. One client per (provider, key, base URL), so a change of provider settings gets
    its own."""

    def __init__(self) -> None:
        self._clients: dict[tuple[str, str, str], Any] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    def llm(self) -> LLM:
        """A session's LLM on the shared pool. Call on the worker's event loop; raises
        LLMNotConfigured without a provider. Its `close()` leaves the pool open."""
        key = provider_settings()
        if not any(key[1:]):
            raise LLMNotConfigured()
        running = asyncio.get_running_loop()
        if self._loop is not None and self._loop is not running:
            raise RuntimeError("A SharedModelClient belongs to the event loop that built it")
        client = self._clients.get(key)
        if client is None:
            self._loop = running
            provider, api_key, base_url = key
            new = openai_chat.new_client if provider == "openai" else _new_client
            client = self._clients[key] = new(api_key, base_url)
        return LLM.from_settings(client=client)

    async def aclose(self) -> None:
        """Close the pool(s); a later `llm()` builds a new one."""
        clients, self._clients, self._loop = list(self._clients.values()), {}, None
        for client in clients:
            await client.close()


CACHE: CacheControlEphemeralParam = {"type": "ephemeral"}


def system_blocks(system: str) -> list[TextBlockParam] | str:
    """The system prompt, marked as the start of the cacheable prefix."""
    if not settings.DEEPTHINK_PROMPT_CACHING:
        return system
    return [TextBlockParam(type="text", text=system, cache_control=CACHE)]


MAX_BREAKPOINTS = 4  # the API refuses a request with more


def prompt_message(prompt: Any) -> dict[str, Any]:
    """A prompts.Prompt as the user turn, laid out for the cache: the stable part, then the
    session log (append-only, a breakpoint on its last block, so the next call reads all of
    it from the cache), then the short variable part, which alone is paid in full."""
    if not prompt.log:
        return user_message(prompt.stable, prompt.variable)
    blocks: list[dict[str, Any]] = [{"type": "text", "text": prompt.stable}]
    blocks += [{"type": "text", "text": text} for text in prompt.log]
    if settings.DEEPTHINK_PROMPT_CACHING:
        # The stable part survives a change inside the log (a new epoch); the last log block
        # is where the next call picks up.
        blocks[0]["cache_control"] = CACHE
        blocks[-1]["cache_control"] = CACHE
    blocks.append({"type": "text", "text": prompt.variable})
    return {"role": "user", "content": blocks}


def cache_tool_loop(messages: list[dict[str, Any]], *, system_marked: bool) -> list[dict]:
    """Inside a tool loop, a breakpoint on the newest turn's last block, so the next round
    reads this whole round from the cache. Earlier message breakpoints are dropped if the
    request would pass the API's limit; the caller's list is not changed."""
    if not settings.DEEPTHINK_PROMPT_CACHING or len(messages) < 2:
        return messages
    last = messages[-1]
    content = last.get("content")
    if not isinstance(content, list) or not content or not isinstance(content[-1], dict):
        return messages
    messages = [dict(m) for m in messages]
    budget = MAX_BREAKPOINTS - (1 if system_marked else 0) - 1
    # Keep the latest breakpoints that fit; older ones are covered by the new prefix.
    seen = 0
    for message in reversed(messages[:-1]):
        if not isinstance(message.get("content"), list):
            continue
        blocks = []
        for block in reversed(message["content"]):
            if isinstance(block, dict) and block.get("cache_control"):
                seen += 1
                if seen > budget:
                    block = {k: v for k, v in block.items() if k != "cache_control"}
            blocks.append(block)
        message["content"] = list(reversed(blocks))
    tail = [
        *content[:-1],
        {**content[-1], "cache_control": CACHE}
        if content[-1].get("type") in ("text", "tool_result")
        else content[-1],
    ]
    messages[-1] = {**last, "content": tail}
    return messages


def user_message(stable: str, variable: str) -> dict[str, Any]:
    """A user turn whose first part (the question, instructions, evidence) is the same on
    every call of a session, so it is read from the prompt cache after the first call."""
    first: dict[str, Any] = {"type": "text", "text": stable}
    if settings.DEEPTHINK_PROMPT_CACHING:
        first["cache_control"] = CACHE
    return {"role": "user", "content": [first, {"type": "text", "text": variable}]}


# --- which models a session may pick -----------------------------------------------------


@dataclass(frozen=True)
class ModelList:
    ids: tuple[str, ...]
    # "api": the server listed them; "table": the built-in list; "configured": the operator's
    source: str


_model_lists: dict[tuple[str, str, str], tuple[float, ModelList]] = {}
MODEL_LIST_TTL = 300.0


def available_models() -> ModelList:
    """The models the operator listed (DEEPTHINK_MODELS, with DEEPTHINK_MODEL and
    DEEPTHINK_FAST_MODEL); else those the server lists (cached for a few minutes); else, for
    Anthropic, the built-in table plus DEEPTHINK_MODEL, for an OpenAI-compatible server the
    configured models. Synchronous: forms and the CLI use it."""
    from thinking.provider.capabilities import MODEL_IDS

    named = [settings.DEEPTHINK_MODEL, settings.DEEPTHINK_FAST_MODEL, *settings.DEEPTHINK_MODELS]
    configured = ModelList(tuple(m for m in dict.fromkeys(named) if m), source="configured")
    if settings.DEEPTHINK_MODELS:
        return configured
    provider, api_key, base_url = provider_settings()
    fallback = (
        configured
        if provider == "openai"
        else ModelList(tuple(dict.fromkeys([settings.DEEPTHINK_MODEL, *MODEL_IDS])), "table")
    )
    if not is_configured():
        return fallback
    key = (provider, base_url, api_key)
    cached = _model_lists.get(key)
    if cached and time.monotonic() - cached[0] < MODEL_LIST_TTL:
        return cached[1]
    try:
        if provider == "openai":
            ids = openai_chat.list_models(api_key, base_url)
        else:
            client = anthropic.Anthropic(
                api_key=api_key or "no-key-needed",
                base_url=base_url or None,
                max_retries=0,
                timeout=5,
            )
            with client:
                ids = tuple(model.id for model in client.models.list(limit=100))
        found = ModelList(ids, source="api") if ids else fallback
    except (anthropic.AnthropicError, openai_chat.SDKError, TypeError, ValueError):
        # Local servers (Ollama's Anthropic endpoint, some vLLM setups) list no models.
        found = fallback
    _model_lists[key] = (time.monotonic(), found)
    return found


def refuse_model(model_id: str) -> str:
    """Why a session may not use this model ("" if it may), in words for the form."""
    models = available_models()
    if model_id in models.ids:
        return ""
    if models.source == "api":
        return (
            f"The model provider does not list the model {model_id!r}, so it cannot run "
            f"here. It lists: {', '.join(models.ids[:12])}."
        )
    if models.source == "configured":
        return (
            f"{model_id!r} is not one of the models this deployment offers: "
            f"{', '.join(models.ids[:12])}."
        )
    return (
        f"{model_id!r} is not a model this deployment knows (the model provider has no model "
        f"list to ask). Known: {', '.join(models.ids[:12])}."
    )
