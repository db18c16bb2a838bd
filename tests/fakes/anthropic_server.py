"""A fake Anthropic Messages API server for tests and offline runs.

It is a real HTTP server on 127.0.0.1 (stdlib ``ThreadingHTTPServer`` in a daemon thread)
that speaks the wire format the ``anthropic`` SDK 2.x parses: SSE streams in which every
event carries an ``event:`` line, ``usage`` in ``message_start`` and ``message_delta``,
mid-stream ``event: error``, and Anthropic-shaped JSON error bodies with ``retry-after-ms``
so SDK retries stay fast. Point the real client at it::

    with FakeAnthropic() as fake:
        client = anthropic.AsyncAnthropic(base_url=fake.base_url, api_key="test")
        fake.enqueue(Reply(text="hello"))
        ...

Responses come first from the FIFO queue filled by :meth:`FakeAnthropic.enqueue`, then from
``fake.responder`` (default: :meth:`FakeAnthropic.scripted_mind`, a deterministic imitation of
a model following the app's line-format prompts).

Run it standalone to try the app offline::

    python -m tests.fakes.anthropic_server --port 8765 --delay 0.5
    ANTHROPIC_BASE_URL=http://127.0.0.1:8765 ANTHROPIC_API_KEY=test ...
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import re
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = [
    "FakeAnthropic",
    "HttpError",
    "MindState",
    "Reply",
    "StreamError",
    "main",
    "scripted_mind",
]

CHUNK_SIZE = 20  # characters per text/thinking/input_json delta
_DISCONNECT_ERRORS = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)

_ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}


@dataclass
class Reply:
    """One assistant message, streamed (or returned as JSON when ``stream`` is false)."""

    text: str = ""
    thinking: str | None = None
    redacted: bool = False
    tool_uses: list[dict] = field(default_factory=list)
    stop_reason: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    delay: float | None = None
    chunk_delay: float = 0.0
    # Content blocks in any order (e.g. interleaved thinking: thinking, text, thinking,
    # tool_use); when given, replaces text/thinking/redacted/tool_uses.
    blocks: list[dict] | None = None


@dataclass
class HttpError:
    """An HTTP error answered before any body, as the real API does."""

    status: int
    type: str
    message: str = "fake error"
    retry_after_ms: int = 1


@dataclass
class StreamError:
    """A 200 stream that starts normally, emits ``text_before``, then ``event: error``.

    For a non-streaming request it is answered as the equivalent HTTP error (529 for
    ``overloaded_error``), which is what the real API does.
    """

    type: str = "overloaded_error"
    message: str = "Overloaded"
    text_before: str = "partial "


Response = Reply | HttpError | StreamError
Responder = Callable[[dict], Response]


# --------------------------------------------------------------------------------------
# The scripted mind: a deterministic stand-in for a model following our prompts.
# --------------------------------------------------------------------------------------

THOUGHT_TYPES = ("exploration", "connection", "critique", "insight")

_QUESTION_TEMPLATES = (
    "What evidence most directly bears on {focus}?",
    "Which assumptions behind {focus} are weakest, and how could they be tested?",
    "How do experts disagree about {focus}, and why?",
    "What would change the conclusion about {focus}?",
    "Which concrete examples best illustrate {focus}?",
    "What are the second-order effects of {focus}?",
    "Where do the current sources on {focus} conflict?",
)

_QUESTION_REASONS = (
    "It targets the largest remaining gap in the evidence.",
    "Testing the weakest assumption protects against a confident but wrong answer.",
    "Understanding disagreement shows where the uncertainty really lies.",
    "Knowing what would flip the conclusion shows how robust it is.",
    "Concrete cases keep the reasoning grounded.",
    "Indirect consequences are easy to overlook.",
    "Conflicting sources need to be reconciled before synthesis.",
)

_THOUGHT_TEMPLATES = {
    "exploration": "Exploring {focus} from a new angle (step {n}): the basic mechanism matters "
    "more than the headline claims.",
    "connection": "Connecting threads on {focus} (step {n}): two separate findings point to "
    "the same underlying cause.",
    "critique": "Critiquing the reasoning on {focus} (step {n}): the strongest claim so far "
    "rests on a single source.",
    "insight": "Insight on {focus} (step {n}): the trade-off depends mostly on scale and "
    "context, not on the approach itself.",
}


@dataclass
class MindState:
    """Thread-safe counters that make scripted replies differ from call to call."""

    calls: int = 0
    answers: int = 0
    syntheses: int = 0
    questions: int = 0
    thoughts: int = 0
    plain: int = 0
    plans: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def bump(self, kind: str) -> tuple[int, int]:
        """Count one call of ``kind``; return (calls so far, calls of this kind so far)."""
        with self.lock:
            self.calls += 1
            value = getattr(self, kind) + 1
            setattr(self, kind, value)
            return self.calls, value

    def clear(self) -> None:
        with self.lock:
            self.calls = self.answers = self.syntheses = self.questions = self.thoughts = 0
            self.plain = self.plans = 0


_DEFAULT_MIND = MindState()


def _block_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            block.get("text", "")
            for block in content
            if isinstance(block, dict) and block.get("type") == "text"
        ]
        return "\n".join(p for p in parts if isinstance(p, str))
    return ""


def _last_user_text(body: dict) -> str:
    messages = body.get("messages")
    if not isinstance(messages, list):
        return ""
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            return _block_text(message.get("content"))
    return ""


_FOCUS_RE = re.compile(r"^\s*(Current focus|Question|Original Question):\s*(.+?)\s*$", re.MULTILINE)


def _find_focus(body: dict, last_user: str) -> tuple[str | None, str | None]:
    """Return (current focus, question) from "Current focus:" / "Question:" lines."""
    texts = [last_user]
    messages = body.get("messages")
    if isinstance(messages, list):
        texts += [_block_text(m.get("content")) for m in reversed(messages) if isinstance(m, dict)]
    texts.append(_block_text(body.get("system")))
    focus: str | None = None
    question: str | None = None
    for text in texts:
        for label, value in _FOCUS_RE.findall(text):
            value = value.strip()
            if not value or value.startswith("<"):
                continue
            if label == "Current focus" and focus is None:
                focus = value
            elif label in ("Question", "Original Question") and question is None:
                question = value
        if focus and question:
            break
    return focus, question


def _shorten(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


_SOURCE_RE = re.compile(r'<source n="(\d+)"')
_RANKED_RE = re.compile(r"^\[(\d+)\] .*\(priority now (\d+)\)$", re.MULTILINE)


def _final_block(
    label: str, subject: str, n: int, confidence: float, sources: Sequence[str] = ()
) -> str:
    quoted = f"\u201c{subject}\u201d"
    cite = "".join(f" [{number}]" for number in sources[:2])
    return (
        f"{label}: On the question {quoted}, the evidence gathered so far points to a "
        f"consistent picture: the outcome depends mainly on context and scale{cite} "
        f"(pass {n}).\n"
        "\n"
        f"In short, the most defensible position on {quoted} is a qualified one: the main "
        "claims hold in typical cases, with clear exceptions at the extremes.\n"
        "INSIGHTS:\n"
        f"- The key driver behind {quoted} is context rather than any single factor.\n"
        f"- Sources agree on the direction of the effect but not on its size (pass {n}).\n"
        f"CONFIDENCE: {confidence:.2f}\n"
        "REMAINING:\n"
        f"- How well does the conclusion on {quoted} hold outside typical cases?"
    )


def scripted_mind(body: dict, state: MindState | None = None) -> Reply:
    """Imitate a model following our prompts, based on the last user message.

    Precedence: "ANSWER:" > "SYNTHESIS:" > "QUESTION:" > "THOUGHT:" > plain text. The
    markers are matched case-sensitively. ``state`` holds the counters (one per server);
    without it a module-level state is used.
    """
    state = _DEFAULT_MIND if state is None else state
    messages = body.get("messages") if isinstance(body.get("messages"), list) else []
    rounds = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")
    # Inside a tool loop the last user turn holds tool results: the task is in the first one.
    prompt = _block_text(messages[0].get("content")) if rounds else _last_user_text(body)
    focus, question = _find_focus(body, prompt)
    subject = _shorten(question or focus or "the question at hand")
    topic = f"\u201c{_shorten(focus or question or 'the question at hand')}\u201d"
    tools = {t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)}
    if "THOUGHT:" in prompt and tools and "ANSWER:" not in prompt:
        used = _use_tools(state, tools, rounds, subject)
        if used is not None:
            return used

    thinking: str | None = None
    config = body.get("thinking")
    if isinstance(config, dict) and config.get("type") in ("enabled", "adaptive"):
        thinking = (
            ""
            if config.get("display") == "omitted"
            else f"Let me consider {topic} carefully before answering."
        )

    if "WEB QUERIES:" in prompt and "PLAN:" in prompt:
        _, n = state.bump("plans")
        text = (
            f"PLAN:\n1. Clarify what {topic} asks\n2. Gather evidence from notes and the web\n"
            "3. Test the strongest explanation against counterexamples\n4. Synthesise\n"
            f"TERMS: {', '.join(w for w in subject.split()[:4])}\n"
            f"WEB QUERIES:\n- {subject}\n- {subject} evidence (plan {n})\n"
            f"MEMORY QUERIES:\n- {subject}"
        )
    elif "QUESTION_ID:" in prompt:
        # Re-ranking: the last listed open question moves to the top, the rest keep theirs.
        _, n = state.bump("plain")
        listed = _RANKED_RE.findall(prompt)
        top = len(listed) - 1
        blocks = [
            f"QUESTION_ID: {qid}\nPRIORITY: {10 if i == top else int(p)}\n"
            f"WHY: {'New evidence makes this the most pressing' if i == top else 'Unchanged'}"
            for i, (qid, p) in enumerate(listed)
        ]
        text = "\n---\n".join(blocks) or "Nothing to rank."
    elif "ANSWER:" in prompt:
        _, n = state.bump("answers")
        text = _final_block("ANSWER", subject, n, 0.78, _SOURCE_RE.findall(prompt))
    elif "SYNTHESIS:" in prompt:
        _, n = state.bump("syntheses")
        confidence = min(0.9, round(0.45 + 0.1 * (n - 1), 2))
        text = _final_block("SYNTHESIS", subject, n, confidence, _SOURCE_RE.findall(prompt))
    elif "QUESTION:" in prompt:
        _, n = state.bump("questions")
        count = 3 if n % 2 else 2
        blocks = []
        for i in range(count):
            k = (n - 1) * 3 + i  # unique per block across calls
            template = _QUESTION_TEMPLATES[k % len(_QUESTION_TEMPLATES)]
            blocks.append(
                f"QUESTION: {template.format(focus=topic)} (line of inquiry {k + 1})\n"
                f"PRIORITY: {9 - k % 6}\n"
                f"WHY: {_QUESTION_REASONS[k % len(_QUESTION_REASONS)]}"
            )
        text = "\n---\n".join(blocks)
    elif "THOUGHT:" in prompt:
        _, n = state.bump("thoughts")
        blocks = []
        for i in range(3):
            k = (n - 1) * 3 + i
            kind = THOUGHT_TYPES[k % len(THOUGHT_TYPES)]
            confidence = 0.5 + 0.05 * (k % 8)
            blocks.append(
                f"THOUGHT: {_THOUGHT_TEMPLATES[kind].format(focus=topic, n=k + 1)}\n"
                f"TYPE: {kind}\n"
                f"CONFIDENCE: {confidence:.2f}"
            )
        text = "\n---\n".join(blocks)
        if "<interactive>" in prompt:  # the prompt asks for the tag format: wrap the lines
            text = _tagged(text, topic, n, enhanced="<analysis>" in prompt)
    else:
        _, n = state.bump("plain")
        text = f"Noted. A brief reflection on {topic}: it is worth approaching step by step (#{n})."
    return Reply(text=text, thinking=thinking)


def _use_tools(state: MindState, tools: set, rounds: int, subject: str) -> Reply | None:
    """Every third thought cycle, search (and report progress), then use the scratchpad,
    then write the thoughts: a real tool loop for demos and end-to-end tests."""
    if (state.thoughts + 1) % 3 != 1:
        return None
    search = "web_search" if "web_search" in tools else "memory_search"
    if rounds == 0 and search in tools:
        uses = [{"name": search, "input": {"query": subject, "max_results": 3}}]
        if "progress" in tools:
            uses.append(
                {
                    "name": "progress",
                    "input": {
                        "stage": "research",
                        "message": f"Looking for evidence on {_shorten(subject, 60)}",
                        "plan_step": 2,
                    },
                }
            )
        return Reply(text="Let me look for evidence first.", tool_uses=uses)
    if rounds == 1 and "think" in tools:
        note = f"Which of the sources found bear directly on {_shorten(subject, 60)}? Check [1]."
        return Reply(tool_uses=[{"name": "think", "input": {"thought": note}}])
    return None


def _tagged(lines: str, topic: str, n: int, *, enhanced: bool) -> str:
    """A thought reply in the standard or enhanced tag format, stop signal false."""
    if enhanced:
        think = (
            f"<analysis>Cycle {n}: what is known and missing about {topic}.</analysis>\n"
            f"<plan>Look at {topic} from a new angle, then test it against a counterexample."
            "</plan>\n"
            f"<reasoning>Earlier ideas on {topic} left a gap; these thoughts close part of it."
            "</reasoning>"
        )
    else:
        think = f"Thinking through {topic} once more (cycle {n})."
    return (
        f"<think>\n{think}\n</think>\n<interactive>\n<response>\n{lines}\n</response>\n"
        '<stop_signal type="boolean">false</stop_signal>\n</interactive>'
    )


# --------------------------------------------------------------------------------------
# Wire helpers
# --------------------------------------------------------------------------------------


def _chunks(text: str, size: int = CHUNK_SIZE) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _error_body(type_: str, message: str, request_id: str) -> dict:
    return {"type": "error", "error": {"type": type_, "message": message}, "request_id": request_id}


def _usage(reply: Reply, body_len: int, cached: tuple[int, int] = (0, 0)) -> dict:
    """Usage as the API reports it: `input_tokens` excludes what was read from or written to
    the prompt cache (`cached` = tokens read, tokens written), estimated at 4 bytes a token."""
    read, write = cached
    if reply.cache_read_tokens or reply.cache_write_tokens:
        read, write = reply.cache_read_tokens, reply.cache_write_tokens
    return {
        "input_tokens": reply.input_tokens or max(0, body_len // 4 - read - write),
        "output_tokens": reply.output_tokens or max(1, len(reply.text) // 4),
        "cache_creation_input_tokens": write,
        "cache_read_input_tokens": read,
    }


def _prefix_keys(body: dict) -> list[tuple[int, str]]:
    """(tokens, hash) of each cacheable prefix of a request."""
    keys = []
    parts: list[object] = []

    def visit(block: object) -> None:
        parts.append(block)
        if isinstance(block, dict) and block.get("cache_control"):
            text = json.dumps([body.get("model"), parts], sort_keys=True)
            keys.append((len(json.dumps(parts, sort_keys=True)) // 4, text))

    for tool in body.get("tools") or []:
        visit(tool)
    system = body.get("system")
    for block in system if isinstance(system, list) else [system]:
        visit(block)
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else [content]:
            visit(block)
    return keys


def _content_blocks(reply: Reply, n: int) -> list[dict]:
    """The final content blocks of a reply (as in a non-streaming Message)."""
    if reply.blocks is not None:
        return [dict(block) for block in reply.blocks]
    blocks: list[dict] = []
    if reply.redacted:
        blocks.append({"type": "redacted_thinking", "data": f"redacted-{n}"})
    if reply.thinking is not None:
        blocks.append({"type": "thinking", "thinking": reply.thinking, "signature": f"sig-{n}"})
    if reply.text or not (blocks or reply.tool_uses):
        blocks.append({"type": "text", "text": reply.text})
    for i, tool in enumerate(reply.tool_uses):
        blocks.append(
            {
                "type": "tool_use",
                "id": tool.get("id") or f"toolu_fake_{n}_{i}",
                "name": tool["name"],
                "input": tool.get("input") or {},
            }
        )
    return blocks


def _stop_reason(reply: Reply) -> str:
    tools = reply.tool_uses or any(b.get("type") == "tool_use" for b in reply.blocks or [])
    return reply.stop_reason or ("tool_use" if tools else "end_turn")


def _sse(event: str, data: dict) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _stream_events(reply: Reply, n: int, model: str, usage: dict) -> Iterator[tuple[bytes, bool]]:
    """Yield (SSE bytes, is_delta) for a full streamed message."""
    start_usage = dict(usage, output_tokens=1)
    yield (
        _sse(
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": f"msg_fake_{n}",
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": start_usage,
                },
            },
        ),
        False,
    )
    yield _sse("ping", {"type": "ping"}), False
    for index, block in enumerate(_content_blocks(reply, n)):
        kind = block["type"]
        if kind == "redacted_thinking":
            start, deltas = block, []
        elif kind == "thinking":
            start = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [
                {"type": "thinking_delta", "thinking": c} for c in _chunks(block["thinking"]) if c
            ]
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        elif kind == "text":
            start = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": c} for c in _chunks(block["text"])]
        else:  # tool_use
            start = dict(block, input={})
            deltas = [{"type": "input_json_delta", "partial_json": ""}]
            deltas += [
                {"type": "input_json_delta", "partial_json": c}
                for c in _chunks(json.dumps(block["input"]))
            ]
        yield (
            _sse(
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": start},
            ),
            False,
        )
        for delta in deltas:
            yield (
                _sse(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                ),
                True,
            )
        yield _sse("content_block_stop", {"type": "content_block_stop", "index": index}), False
    yield (
        _sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": _stop_reason(reply), "stop_sequence": None},
                "usage": usage,
            },
        ),
        False,
    )
    yield _sse("message_stop", {"type": "message_stop"}), False


# --------------------------------------------------------------------------------------
# HTTP server
# --------------------------------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    fake: FakeAnthropic

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], OSError):  # client went away: stay quiet
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    # Small SSE chunks must not wait ~40 ms on Nagle's algorithm and delayed ACKs.
    disable_nagle_algorithm = True
    protocol_version = "HTTP/1.1"
    server_version = "FakeAnthropic/1.0"
    server: _Server

    # -- plumbing ------------------------------------------------------------------

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.fake.verbose:
            super().log_message(format, *args)

    def setup(self) -> None:
        super().setup()
        self.server.fake._track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        except _DISCONNECT_ERRORS:
            pass
        finally:
            self.server.fake._track(self.connection, add=False)

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _send_json(
        self, status: int, payload: dict, request_id: str, extra: dict | None = None
    ) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("request-id", request_id)
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _send_error(self, status: int, type_: str, message: str, request_id: str) -> None:
        self._send_json(status, _error_body(type_, message, request_id), request_id)

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):X}\r\n".encode() + data + b"\r\n")

    # -- routing -------------------------------------------------------------------

    def do_POST(self) -> None:
        try:
            self._post()
        except _DISCONNECT_ERRORS:
            self.close_connection = True

    def _not_found(self) -> None:
        try:
            self._read_body()
            request_id = self.server.fake._request_id()
            self._send_error(404, "not_found_error", f"Not found: {self.path}", request_id)
        except _DISCONNECT_ERRORS:
            self.close_connection = True

    do_PUT = do_PATCH = do_DELETE = _not_found

    def do_GET(self) -> None:
        """The Models API: GET /v1/models/<id> answers for ids in `fake.models`."""
        try:
            fake = self.server.fake
            path = self.path.split("?", 1)[0].rstrip("/")
            model_id = path.removeprefix("/v1/models/")
            if path.startswith("/v1/models/") and model_id in fake.models:
                self._send_json(200, fake.models[model_id], fake._request_id())
            else:
                self._not_found()
        except _DISCONNECT_ERRORS:
            self.close_connection = True

    def _post(self) -> None:
        fake = self.server.fake
        raw = self._read_body()
        path = self.path.split("?", 1)[0].rstrip("/")
        request_id = fake._request_id()
        if path not in ("/v1/messages", "/v1/messages/count_tokens"):
            self._send_error(404, "not_found_error", f"Not found: {self.path}", request_id)
            return
        try:
            body = json.loads(raw)
            if not isinstance(body, dict):
                raise ValueError("body must be a JSON object")
        except ValueError as exc:
            self._send_error(400, "invalid_request_error", f"Malformed JSON: {exc}", request_id)
            return
        if path == "/v1/messages/count_tokens":
            self._send_json(200, {"input_tokens": len(raw) // 4}, request_id)
            return

        fake._record(
            {
                "path": self.path,
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body": body,
            }
        )
        response = fake._next_response(body)
        streaming = body.get("stream") is True
        delay = response.delay if isinstance(response, Reply) else None
        delay = fake.delay if delay is None else delay
        if delay > 0:
            time.sleep(delay)

        if isinstance(response, HttpError):
            self._send_json(
                response.status,
                _error_body(response.type, response.message, request_id),
                request_id,
                {"retry-after-ms": str(response.retry_after_ms)},
            )
            return
        if isinstance(response, StreamError) and not streaming:
            status = _ERROR_STATUS.get(response.type, 500)
            self._send_json(
                status,
                _error_body(response.type, response.message, request_id),
                request_id,
                {"retry-after-ms": "1"},
            )
            return

        n = fake._next_serial()
        model = str(body.get("model") or "claude-fake")
        if isinstance(response, StreamError):
            self._stream_error(response, n, model, len(raw), request_id)
            return
        usage = _usage(response, len(raw), fake._cache_lookup(body))
        fake._count_usage(usage)
        if not streaming:
            message = {
                "id": f"msg_fake_{n}",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": _content_blocks(response, n),
                "stop_reason": _stop_reason(response),
                "stop_sequence": None,
                "usage": usage,
            }
            self._send_json(200, message, request_id)
            return
        self._start_stream(request_id)
        for data, is_delta in _stream_events(response, n, model, usage):
            if is_delta and response.chunk_delay > 0:
                time.sleep(response.chunk_delay)
            self._write_chunk(data)
        self._write_chunk(b"")

    def _start_stream(self, request_id: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("request-id", request_id)
        self.end_headers()

    def _stream_error(
        self, error: StreamError, n: int, model: str, body_len: int, request_id: str
    ) -> None:
        reply = Reply(text=error.text_before)
        usage = _usage(reply, body_len)
        self._start_stream(request_id)
        events = _stream_events(reply, n, model, usage)
        for data, _ in itertools.islice(events, 2):  # message_start, ping
            self._write_chunk(data)
        if error.text_before:
            self._write_chunk(
                _sse(
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": 0,
                        "content_block": {"type": "text", "text": ""},
                    },
                )
            )
            for piece in _chunks(error.text_before):
                self._write_chunk(
                    _sse(
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": 0,
                            "delta": {"type": "text_delta", "text": piece},
                        },
                    )
                )
        self._write_chunk(_sse("error", _error_body(error.type, error.message, request_id)))
        self._write_chunk(b"")


# --------------------------------------------------------------------------------------
# Public façade
# --------------------------------------------------------------------------------------


class FakeAnthropic:
    """A local Anthropic Messages API. Use ``start()``/``stop()`` or ``with FakeAnthropic():``."""

    def __init__(
        self, *, delay: float = 0.0, host: str = "127.0.0.1", port: int = 0, verbose: bool = False
    ) -> None:
        self.delay = delay
        self.host = host
        self.port = port
        self.verbose = verbose
        self.base_url = ""
        self.requests: list[dict] = []
        # Model id -> a Models API ModelInfo body; unknown ids answer 404 like local servers.
        self.models: dict[str, dict] = {}
        # Prompt-cache accounting: prefixes seen, and input tokens by kind over all requests.
        self._cached_prefixes: set[str] = set()
        self.usage_totals = {"input_tokens": 0, "cache_read": 0, "cache_write": 0}
        self.mind = MindState()
        self.responder: Responder = self.scripted_mind
        self._queue: deque[Response] = deque()
        self._lock = threading.Lock()
        self._serial = 0
        self._request_serial = 0
        self._connections: set[socket.socket] = set()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    # -- prompt cache ------------------------------------------------------------------

    def _cache_lookup(self, body: dict) -> tuple[int, int]:
        """(tokens read, tokens written): the longest prefix seen before is read, the rest up
        to the last breakpoint is written, as the API's prompt cache does."""
        keys = _prefix_keys(body)
        if not keys:
            return 0, 0
        with self._lock:
            read = max((size for size, key in keys if key in self._cached_prefixes), default=0)
            self._cached_prefixes.update(key for _, key in keys)
        return read, max(0, keys[-1][0] - read)

    def _count_usage(self, usage: dict) -> None:
        with self._lock:
            self.usage_totals["input_tokens"] += usage["input_tokens"]
            self.usage_totals["cache_read"] += usage["cache_read_input_tokens"]
            self.usage_totals["cache_write"] += usage["cache_creation_input_tokens"]

    @property
    def cached_share(self) -> float:
        """The share of all input tokens that repeated an earlier request's prefix."""
        totals = self.usage_totals
        total = totals["input_tokens"] + totals["cache_read"] + totals["cache_write"]
        return totals["cache_read"] / total if total else 0.0

    # -- lifecycle -----------------------------------------------------------------

    def start(self) -> FakeAnthropic:
        if self._server is not None:
            return self
        server = _Server((self.host, self.port), _Handler)
        server.fake = self
        self._server = server
        self.port = server.server_address[1]
        self.base_url = f"http://{self.host}:{self.port}"
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"fake-anthropic-{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        with self._lock:
            connections = list(self._connections)
            self._connections.clear()
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeAnthropic:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def serve_forever(self) -> None:
        """Start and block until KeyboardInterrupt (used by the CLI)."""
        self.start()
        try:
            while True:
                time.sleep(3600)
        finally:
            self.stop()

    # -- scripting -----------------------------------------------------------------

    def enqueue(self, *responses: Response) -> None:
        """Queue responses, served first-in first-out before falling back to ``responder``."""
        with self._lock:
            self._queue.extend(responses)

    def reset(self) -> None:
        """Clear the queue, the recorded requests and the mind's counters; restore the responder."""
        with self._lock:
            self._queue.clear()
            self.requests.clear()
            self._cached_prefixes.clear()
            self.usage_totals = {"input_tokens": 0, "cache_read": 0, "cache_write": 0}
        self.mind.clear()
        self.responder = self.scripted_mind

    def scripted_mind(self, body: dict) -> Reply:
        """The default responder, with this server's own counters."""
        return scripted_mind(body, self.mind)

    # -- used by the handler -------------------------------------------------------

    def _record(self, request: dict) -> None:
        with self._lock:
            self.requests.append(request)

    def _next_response(self, body: dict) -> Response:
        with self._lock:
            queued = self._queue.popleft() if self._queue else None
        return queued if queued is not None else self.responder(body)

    def _next_serial(self) -> int:
        with self._lock:
            self._serial += 1
            return self._serial

    def _request_id(self) -> str:
        with self._lock:
            self._request_serial += 1
            return f"req_fake_{self._request_serial:06d}"

    def _track(self, conn: socket.socket, *, add: bool) -> None:
        with self._lock:
            if add:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Run a fake Anthropic Messages API server.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before each response")
    parser.add_argument("--quiet", action="store_true", help="do not log requests")
    args = parser.parse_args(argv)
    fake = FakeAnthropic(delay=args.delay, host=args.host, port=args.port, verbose=not args.quiet)
    fake.start()
    print(f"Fake Anthropic API listening on {fake.base_url}", flush=True)
    print(f"Try: ANTHROPIC_BASE_URL={fake.base_url} ANTHROPIC_API_KEY=test", flush=True)
    try:
        fake.serve_forever()
    except KeyboardInterrupt:
        print("stopped", flush=True)


if __name__ == "__main__":
    main()
