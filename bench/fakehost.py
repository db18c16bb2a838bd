"""The fake Claude and Exa servers (tests/fakes), in a process of their own.

A real model provider costs the worker nothing but waiting. A fake inside the worker's process
would compete with it for the interpreter (it parses every request and streams every reply in
Python), so the benchmarks run FakeAnthropic and FakeExa in a child process, on 127.0.0.1, and
drive them over a pipe: set the per-call latency, read back what was requested and when.

The responder is the fakes' scripted mind with one MindState per session (so sessions running
side by side each follow the same script) and a cycle limit: the N-th thought reply of a
session reports a huge output-token count, which takes the session over its token ceiling, so
it writes its final answer after exactly N thought cycles, whatever the clock says.

Each session is recognised by the tag "(bench KEY)" at the end of its question.

One change to the fakes' behaviour, in this process only: their handlers set TCP_NODELAY
(see `_serve`); without it every response costs ~40 ms of Nagle/delayed-ACK stall.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import re
import threading
import time
from typing import Any

from tests.fakes import anthropic_server, exa_server
from tests.fakes.anthropic_server import (
    CHECK_PASSAGE,
    FakeAnthropic,
    MindState,
    Reply,
    scripted_mind,
)
from tests.fakes.exa_server import FakeExa, Recorded

BOMB_TOKENS = 10**9  # output tokens reported by a session's last cycle
TOKEN_CEILING = 10**8  # the benchmark sessions' ceiling: far above real use, far below BOMB
_KEY = re.compile(r"\(bench ([\w.-]+)\)")


def session_tag(key: str) -> str:
    return f"(bench {key})"


def _first_user_text(body: dict) -> str:
    messages = body.get("messages") or []
    if not messages or not isinstance(messages[0], dict):
        return ""
    content = messages[0].get("content")
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") for b in content or [] if isinstance(b, dict))


def _kind(reply: Reply) -> str:
    text = reply.text
    if reply.tool_uses:
        return "tool-round"
    for marker, kind in (
        ("VERDICT:", "check"),
        ("PLAN:", "plan"),
        ("ANSWER:", "final"),
        ("SYNTHESIS:", "synthesis"),
        ("QUESTION:", "questions"),
        ("THOUGHT:", "thoughts"),
    ):
        if marker in text:
            return kind
    return "other"


def _sizes(body: dict) -> dict[str, int]:
    """Tokens (bytes / 4, as the fake counts) after the last cache breakpoint: the rest of the
    first user message (its variable part) and the later turns of a tool loop."""
    blocks: list[tuple[str, Any]] = [("tools", t) for t in body.get("tools") or []]
    system = body.get("system")
    blocks += [("system", b) for b in (system if isinstance(system, list) else [system])]
    for index, message in enumerate(body.get("messages") or []):
        content = message.get("content") if isinstance(message, dict) else None
        where = "variable" if index == 0 else "turns"
        blocks += [(where, b) for b in (content if isinstance(content, list) else [content])]
    marked = [
        i for i, (_, b) in enumerate(blocks) if isinstance(b, dict) and b.get("cache_control")
    ]
    after = blocks[(marked[-1] + 1 if marked else 0) :]
    size = {"variable": 0, "turns": 0, "other": 0}
    for where, block in after:
        tokens = len(json.dumps(block)) // 4
        size[where if where in size else "other"] += tokens
    return size


class _Host:
    """The responder's state: one mind per session, cycle counts and a request log."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.local = threading.local()
        self.cycle_limit = 0
        self.minds: dict[str, MindState] = {}
        self.cycles: dict[str, int] = {}
        self.requests: list[dict[str, Any]] = []
        self.searches: list[dict[str, Any]] = []

    def clear(self) -> None:
        with self.lock:
            self.minds.clear()
            self.cycles.clear()
            self.requests.clear()
            self.searches.clear()

    def respond(self, body: dict) -> Reply:
        arrived = time.monotonic()
        # A citation check's passages come before its claims and carry whatever their pages
        # say (a cached page found for another session names that session): its claims
        # name its own.
        match = _KEY.search(CHECK_PASSAGE.sub("", _first_user_text(body)))
        key = match.group(1) if match else "?"
        with self.lock:
            mind = self.minds.setdefault(key, MindState())
        reply = scripted_mind(body, mind)
        kind = _kind(reply)
        if kind == "thoughts":
            with self.lock:
                done = self.cycles[key] = self.cycles.get(key, 0) + 1
            if self.cycle_limit and done >= self.cycle_limit:
                reply.output_tokens = BOMB_TOKENS
        record = {
            "t": arrived,
            "key": key,
            "kind": kind,
            "rounds": sum(1 for m in body.get("messages") or [] if m.get("role") == "assistant"),
            **_sizes(body),
        }
        self.local.record = record
        with self.lock:
            self.requests.append(record)
        return reply


class _Anthropic(FakeAnthropic):
    bench: _Host

    def _count_usage(self, usage: dict) -> None:
        super()._count_usage(usage)
        record = getattr(self.bench.local, "record", None)
        if record is not None:
            record["usage"] = {
                "input": usage["input_tokens"],
                "cache_read": usage["cache_read_input_tokens"],
                "cache_write": usage["cache_creation_input_tokens"],
                "output": usage["output_tokens"],
            }


class _Exa(FakeExa):
    bench: _Host

    def _answer(self, record: Recorded) -> tuple[int, dict[str, Any]]:
        started = time.monotonic()
        try:
            return super()._answer(record)
        finally:
            query = record.body.get("query", "") if isinstance(record.body, dict) else ""
            search = {"t0": started, "t1": time.monotonic(), "path": record.path, "query": query}
            self.bench.local.search = search
            with self.bench.lock:
                self.bench.searches.append(search)


def _serve(conn: Any) -> None:
    """The child process: start both fakes, then answer the parent until told to stop (or
    until the parent is gone)."""
    parent = os.getppid()
    # The fakes write each SSE event (and each response's head) in a small write; with
    # Nagle's algorithm on, the client's delayed ACK holds every response ~40 ms. A real
    # provider does not cost that, so the benchmark's fakes send at once.
    anthropic_server._Handler.disable_nagle_algorithm = True
    exa_server._Handler.disable_nagle_algorithm = True
    host = _Host()

    def timed(handle: Any, slot: str) -> Any:
        # How long the fake took to answer a request: from the start of reading its body
        # (checking it too) to the reply's last byte, the fake's own time that a real
        # provider's latency holds, and the CPU its thread used meanwhile. Set on the record
        # the request made (host.local's `slot`), if any.
        def run(handler: Any) -> None:
            received, cpu = time.monotonic(), time.thread_time()
            setattr(host.local, slot, None)
            try:
                handle(handler)
            finally:
                record = getattr(host.local, slot)
                if record is not None:
                    record["provider_cpu"] = time.thread_time() - cpu
                    record["provider"] = (received, time.monotonic())

        return run

    anthropic_server._Handler._post = timed(anthropic_server._Handler._post, "record")
    exa_server._Handler.do_POST = timed(exa_server._Handler.do_POST, "search")
    claude = _Anthropic()
    claude.bench = host
    exa = _Exa()
    exa.bench = host

    def reset() -> None:
        claude.reset()
        claude.responder = host.respond
        exa.reset()
        host.clear()

    claude.start()
    exa.start()
    reset()
    conn.send({"claude": claude.base_url, "exa": exa.base_url, "exa_key": exa.api_key})
    try:
        while True:
            if not conn.poll(1.0):
                if os.getppid() != parent:
                    return
                continue
            op, args = conn.recv()
            if op == "stop":
                conn.send(None)
                return
            if op == "configure":
                claude.delay = float(args.get("delay", claude.delay))
                exa.delay = float(args.get("exa_delay", exa.delay))
                host.cycle_limit = int(args.get("cycles", host.cycle_limit))
                conn.send(None)
            elif op == "reset":
                reset()
                conn.send(None)
            elif op == "stats":
                cpu = os.times()
                with host.lock:
                    requests = [dict(r) for r in host.requests]
                    searches = [dict(s) for s in host.searches]
                conn.send(
                    {
                        "requests": requests,
                        "searches": searches,
                        "usage_totals": dict(claude.usage_totals),
                        "cached_share": claude.cached_share,
                        "exa_max_in_flight": exa.max_in_flight,
                        "cpu_seconds": cpu.user + cpu.system,
                    }
                )
            else:
                conn.send(ValueError(f"unknown op {op!r}"))
    finally:
        claude.stop()
        exa.stop()


class FakeHost:
    """The parent's handle on the child process that runs the fakes."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(child,), name="bench-fakes")
        self.claude_url = self.exa_url = self.exa_key = ""

    def start(self) -> FakeHost:
        self._process.start()
        try:
            if not self._conn.poll(30):
                raise RuntimeError("the fake servers did not start within 30 s")
            urls = self._conn.recv()
        except (EOFError, RuntimeError) as error:
            self.stop()
            raise RuntimeError(f"the fake servers did not start: {error!r}") from error
        self.claude_url, self.exa_url, self.exa_key = urls["claude"], urls["exa"], urls["exa_key"]
        return self

    def _call(self, op: str, **args: Any) -> Any:
        self._conn.send((op, args))
        if not self._conn.poll(60):
            raise RuntimeError(f"the fake servers did not answer {op!r} within 60 s")
        answer = self._conn.recv()
        if isinstance(answer, Exception):
            raise answer
        return answer

    def configure(
        self, *, delay: float | None = None, exa_delay: float | None = None, cycles: int = 0
    ) -> None:
        """Per-call latency of the model and of Exa (seconds), and the cycle limit (0: none)."""
        args: dict[str, Any] = {"cycles": cycles}
        if delay is not None:
            args["delay"] = delay
        if exa_delay is not None:
            args["exa_delay"] = exa_delay
        self._call("configure", **args)

    def reset(self) -> None:
        """Forget requests, prompt-cache prefixes, minds and counters."""
        self._call("reset")

    def stats(self) -> dict[str, Any]:
        return self._call("stats")

    def stop(self) -> None:
        if self._process.is_alive():
            with contextlib.suppress(RuntimeError, OSError, EOFError):
                self._call("stop")
            self._process.join(timeout=10)
            if self._process.is_alive():
                self._process.terminate()
                self._process.join(timeout=5)
        self._conn.close()
