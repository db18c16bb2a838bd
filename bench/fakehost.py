"""The fake Claude and Exa servers, in a process of their own.

This is the one module of the benchmarks that imports the wire-level fakes: if they move,
change the import below (`bench/compare.py` copies the folder they are in, found from
the import, into the tree it compares with).

A real model provider costs the worker nothing but waiting. A fake inside the worker's
process would compete with it for the interpreter (it parses every request and streams every
reply in Python), so the fakes run in a child process on 127.0.0.1, driven over a pipe: set
the per-call latency, read back what was asked and when.

Every session follows the fakes' scripted mind with a state of its own (recognised by the tag
"(bench KEY)" at the end of its question), and a cycle limit: the N-th thought reply of a
session reports a huge output-token count, which takes it over its token ceiling, so it
writes its final answer after exactly N thought cycles, whatever the clock says.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

from fakes import anthropic_server, exa_server

FAKES_DIR = Path(anthropic_server.__file__).resolve().parent
BOMB_TOKENS = 10**9  # output tokens reported by a session's last cycle
TOKEN_CEILING = 10**8  # the benchmark sessions' ceiling: far above real use, far below BOMB
_KEY = re.compile(r"\(bench ([\w.-]+)\)")
_KINDS = (
    ("VERDICT:", "check"),
    ("PLAN:", "plan"),
    ("ANSWER:", "final"),
    ("SYNTHESIS:", "synthesis"),
    ("QUESTION:", "questions"),
    ("THOUGHT:", "thoughts"),
)


def session_tag(key: str) -> str:
    return f"(bench {key})"


def _first_user_text(body: dict[str, Any]) -> str:
    messages = body.get("messages") or []
    if not messages or not isinstance(messages[0], dict):
        return ""
    content = messages[0].get("content")
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") for b in content or [] if isinstance(b, dict))


class _Host:
    """One scripted mind per session, their cycle counts, and what was asked when."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.cycle_limit = 0
        self.minds: dict[str, Any] = {}
        self.cycles: dict[str, int] = {}
        self.requests: list[dict[str, Any]] = []
        self.searches: list[dict[str, Any]] = []

    def clear(self) -> None:
        with self.lock:
            self.minds.clear()
            self.cycles.clear()
            self.requests.clear()
            self.searches.clear()

    def respond(self, body: dict[str, Any]) -> Any:
        """The fake model's responder: called once a request is read and accepted, before
        the fake waits out its latency."""
        arrived = time.monotonic()
        # A citation check's passages may quote another session's pages: its claims, outside
        # the passages, name its own session.
        text = anthropic_server.CHECK_PASSAGE.sub("", _first_user_text(body))
        match = _KEY.search(text)
        key = match.group(1) if match else "?"
        with self.lock:
            mind = self.minds.setdefault(key, anthropic_server.MindState())
        reply = anthropic_server.scripted_mind(body, mind)
        kind = "tool-round" if reply.tool_uses else "other"
        if not reply.tool_uses:
            kind = next((k for marker, k in _KINDS if marker in reply.text), "other")
        if kind == "thoughts":
            with self.lock:
                done = self.cycles[key] = self.cycles.get(key, 0) + 1
            if self.cycle_limit and done >= self.cycle_limit:
                reply.output_tokens = BOMB_TOKENS
        with self.lock:
            self.requests.append({"t": arrived, "key": key, "kind": kind})
        return reply

    def searched(self, body: dict[str, Any]) -> None:
        """The fake Exa's hook: called once a search has waited out its latency."""
        query = body.get("query", "") if isinstance(body, dict) else ""
        with self.lock:
            self.searches.append({"t_end": time.monotonic(), "query": str(query)})


def _serve(conn: Any) -> None:
    """The child process: start both fakes, then answer the parent until told to stop (or
    until the parent is gone)."""
    parent = os.getppid()
    host = _Host()
    claude = anthropic_server.FakeAnthropic()
    exa = exa_server.FakeExa()

    def reset() -> None:
        claude.reset()
        claude.responder = host.respond
        exa.reset()
        exa.on_search = host.searched
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
                with host.lock:
                    requests = [dict(r) for r in host.requests]
                    searches = [dict(s) for s in host.searches]
                conn.send(
                    {
                        "requests": requests,
                        "searches": searches,
                        "cached_share": claude.cached_share,
                        "usage_totals": dict(claude.usage_totals),
                        "exa_max_in_flight": exa.max_in_flight,
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

    @property
    def pid(self) -> int | None:
        return self._process.pid

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

    def configure(self, *, delay: float, exa_delay: float, cycles: int) -> None:
        """Forget everything asked so far, then set the latency of each model call and
        each web search (seconds) and the sessions' cycle limit."""
        self._call("reset")
        self._call("configure", delay=delay, exa_delay=exa_delay, cycles=cycles)

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
