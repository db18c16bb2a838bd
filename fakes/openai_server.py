"""A fake OpenAI-compatible Chat Completions server (vLLM, Ollama's /v1, OpenRouter, ...).

A real HTTP server on 127.0.0.1 (fakes/http_base.py) that speaks what the official
``openai`` SDK parses: ``POST /v1/chat/completions`` answered as an SSE stream of
``chat.completion.chunk`` objects ending in ``data: [DONE]``, the usage in a last chunk with
no choices when ``stream_options.include_usage`` is set, tool calls as ``tool_calls`` deltas
(the arguments' JSON in pieces), and OpenAI-shaped JSON errors. Point the SDK at it::

    with FakeOpenAI(reasoning="reasoning_content") as fake:
        client = openai.AsyncOpenAI(base_url=fake.base_url + "/v1", api_key="test")

It answers as the scripted mind of the Anthropic fake (the same deterministic imitation of a
model following the app's prompts), with the differences of the servers it stands for:

* ``reasoning``: how a reasoning model's reasoning comes: ``"reasoning_content"`` (vLLM,
  DeepSeek) or ``"reasoning"`` (OpenRouter, Ollama) deltas, ``"think_tags"`` inside
  ``<think>…</think>`` at the start of the text (a server without a reasoning parser), or
  ``""`` (none). Every reply then carries reasoning containing ``REASONING_MARK``.
* ``takes_tools``: False answers a request with tool definitions 400, as Ollama does for a
  model without tool support ("does not support tools").
* ``models``: the ids ``GET /v1/models`` lists; None answers it 404.

Run it standalone::

    python -m fakes.openai_server --port 8766 --reasoning think_tags
    DEEPTHINK_PROVIDER=openai OPENAI_BASE_URL=http://127.0.0.1:8766/v1 DEEPTHINK_MODEL=fake ...
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from fakes.anthropic_server import (
    HttpError,
    MindState,
    Reply,
    StreamCut,
    StreamError,
    scripted_mind,
)
from fakes.http_base import DISCONNECT_ERRORS, FakeHandler, FakeServer

__all__ = ["REASONING_MARK", "FakeOpenAI", "main"]

CHUNK_SIZE = 20
REASONING_MARK = "[private reasoning]"
REASONING_MODES = ("", "reasoning_content", "reasoning", "think_tags")

Response = Reply | HttpError | StreamError | StreamCut


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def anthropic_shaped(body: dict) -> dict:
    """The request as the Anthropic fake's scripted mind reads it: system apart, tool
    messages as tool_result turns, tool definitions by name."""
    messages: list[dict] = []
    system = ""
    for message in body.get("messages") or []:
        role = message.get("role")
        if role in ("system", "developer"):
            system += _text(message.get("content"))
        elif role == "tool":
            result = {"type": "tool_result", "tool_use_id": message.get("tool_call_id", "")}
            messages.append({"role": "user", "content": [result]})
        elif role == "assistant":
            messages.append({"role": "assistant", "content": _text(message.get("content"))})
        else:
            messages.append({"role": "user", "content": _text(message.get("content"))})
    tools = [
        {"name": (tool.get("function") or {}).get("name")}
        for tool in body.get("tools") or []
        if isinstance(tool, dict)
    ]
    return {"system": system, "messages": messages, "tools": tools}


def refusal(body: dict) -> str:
    """The 400 message a strict server gives this request; "" when it is acceptable."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: field required"
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "model: field required"
    asked: set[str] = set()
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in (
            "system",
            "developer",
            "user",
            "assistant",
            "tool",
        ):
            return f"messages[{index}]: invalid role"
        if message["role"] == "assistant":
            asked = {c.get("id") for c in message.get("tool_calls") or []}
        elif message["role"] == "tool":
            if message.get("tool_call_id") not in asked:
                return (
                    f"messages[{index}]: a tool message must answer a tool call of the "
                    "assistant message before it"
                )
        else:
            asked = set()
        if message["role"] != "assistant" and not isinstance(message.get("content"), str):
            return f"messages[{index}].content: expected a string"
    return ""


class _Handler(FakeHandler):
    server_version = "FakeOpenAI/1.0"

    def _error(self, status: int, message: str, type_: str = "invalid_request_error") -> None:
        self.send_json(status, {"error": {"message": message, "type": type_, "code": None}})

    def do_GET(self) -> None:
        try:
            fake = self.server.fake
            if self.path.rstrip("/") == "/v1/models" and fake.models is not None:
                listed = [{"id": m, "object": "model", "owned_by": "fake"} for m in fake.models]
                self.send_json(200, {"object": "list", "data": listed})
            else:
                self._error(404, f"Not found: {self.path}", "not_found_error")
        except DISCONNECT_ERRORS:
            self.close_connection = True

    def do_POST(self) -> None:
        try:
            self._post()
        except DISCONNECT_ERRORS:
            self.close_connection = True

    def _post(self) -> None:
        fake: FakeOpenAI = self.server.fake
        raw = self.read_body()
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._error(404, f"Not found: {self.path}", "not_found_error")
            return
        try:
            body = json.loads(raw)
        except ValueError:
            self._error(400, "Malformed JSON")
            return
        fake.requests.append(body)
        problem = refusal(body)
        if problem:
            self._error(400, problem)
            return
        if body.get("tools") and not fake.takes_tools:
            # Ollama's words for a model without tool support.
            self._error(400, f"registry.ollama.ai/library/{body['model']} does not support tools")
            return
        response = fake.next_response(body)
        if fake.delay:
            time.sleep(fake.delay)
        if isinstance(response, HttpError):
            self._error(response.status, response.message, response.type)
            return
        if body.get("stream") is not True:
            self._error(400, "This fake answers streamed requests only.")
            return
        fake.serial += 1
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        for data in fake.chunks(response, body, include_usage=include_usage):
            chunk = f"data: {data}\n\n".encode()
            self.wfile.write(f"{len(chunk):X}\r\n".encode() + chunk + b"\r\n")
        self.wfile.flush()
        cut = isinstance(response, StreamCut)  # (its chunks stop mid-reply, before [DONE])
        if fake.end_delay and not cut:  # the body's last chunk comes a moment after [DONE]
            time.sleep(fake.end_delay)
        if cut or fake.drop_after_done:  # the connection drops instead of the body ending
            self.connection.shutdown(socket.SHUT_RDWR)
            self.close_connection = True
            return
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def _pieces(text: str) -> list[str]:
    return [text[i : i + CHUNK_SIZE] for i in range(0, len(text), CHUNK_SIZE)]


class FakeOpenAI(FakeServer):
    """A local OpenAI-compatible server. ``start()``/``stop()``, or ``with FakeOpenAI():``."""

    handler_class = _Handler
    thread_name = "fake-openai"

    def __init__(
        self,
        *,
        reasoning: str = "",
        takes_tools: bool = True,
        models: list[str] | None = None,
        **server: Any,
    ) -> None:
        super().__init__(**server)  # delay, host, port, verbose
        if reasoning not in REASONING_MODES:
            raise ValueError(f"reasoning must be one of {REASONING_MODES}")
        self.reasoning = reasoning
        self.takes_tools = takes_tools
        self.models = models
        self.requests: list[dict] = []
        self.mind = MindState()
        # Answers a request's body (as sent) once the queue is empty.
        self.responder: Callable[[dict], Response] = self.scripted_mind
        self.serial = 0
        # Seconds between a stream's [DONE] and the chunked body's end, as a busy server's
        # packets may come: a client that stops reading at [DONE] loses its connection.
        self.end_delay = 0.0
        self.drop_after_done = False  # hang up after [DONE] without the body's end
        self._queue: deque[Response] = deque()

    @property
    def api_url(self) -> str:
        """The base URL the SDK takes (OPENAI_BASE_URL): the server's /v1."""
        return f"{self.base_url}/v1"

    def enqueue(self, *responses: Response) -> None:
        """Queue responses, served before the scripted mind answers."""
        with self._lock:
            self._queue.extend(responses)

    def scripted_mind(self, body: dict) -> Reply:
        """The Anthropic fake's scripted mind, reading the chat request."""
        return scripted_mind(anthropic_shaped(body), self.mind)

    def next_response(self, body: dict) -> Response:
        with self._lock:
            if self._queue:
                return self._queue.popleft()
        return self.responder(body)

    def chunks(self, response: Response, body: dict, *, include_usage: bool) -> list[str]:
        """The stream's `data:` payloads, [DONE] last."""
        n, model = self.serial, str(body["model"])

        def chunk(delta: dict, finish: str | None = None) -> str:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            return json.dumps(
                {
                    "id": f"chatcmpl-fake-{n}",
                    "object": "chat.completion.chunk",
                    "created": 0,
                    "model": model,
                    "choices": [choice],
                }
            )

        out = [chunk({"role": "assistant", "content": ""})]
        if isinstance(response, StreamCut):
            return [*out, *(chunk({"content": p}) for p in _pieces(response.text_before))]
        if isinstance(response, StreamError):
            out += [chunk({"content": p}) for p in _pieces(response.text_before)]
            error = {"message": response.message, "type": response.type}
            return [*out, json.dumps({"error": error})]
        reasoning = ""
        if self.reasoning:
            reasoning = f"{REASONING_MARK} Weighing what the prompt asks before answering."
        text = response.text
        if self.reasoning == "think_tags":
            text = f"<think>\n{reasoning}\n</think>\n\n{text}"
        elif reasoning:
            out += [chunk({self.reasoning: p}) for p in _pieces(reasoning)]
        out += [chunk({"content": p}) for p in _pieces(text)]
        for i, use in enumerate(response.tool_uses):
            call = {
                "index": i,
                "id": use.get("id") or f"call_fake_{n}_{i}",
                "type": "function",
                "function": {"name": use["name"], "arguments": ""},
            }
            out.append(chunk({"tool_calls": [call]}))
            arguments = json.dumps(use.get("input") or {})
            out += [
                chunk({"tool_calls": [{"index": i, "function": {"arguments": p}}]})
                for p in _pieces(arguments)
            ]
        finish = response.stop_reason or ("tool_calls" if response.tool_uses else "stop")
        out.append(chunk({}, finish))
        if include_usage:
            prompt = response.input_tokens or len(json.dumps(body)) // 4
            completion = response.output_tokens or max(1, len(text) // 4)
            usage = {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            }
            out.append(json.dumps({"id": f"chatcmpl-fake-{n}", "choices": [], "usage": usage}))
        return [*out, "[DONE]"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Run a fake OpenAI-compatible server.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8766)
    parser.add_argument("--reasoning", default="", choices=REASONING_MODES)
    parser.add_argument("--no-tools", action="store_true", help="refuse tool definitions")
    args = parser.parse_args(argv)
    fake = FakeOpenAI(
        reasoning=args.reasoning, takes_tools=not args.no_tools, host=args.host, port=args.port
    )
    print(f"Fake OpenAI-compatible API on {fake.api_url}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        fake.serve_forever()


if __name__ == "__main__":
    main()
