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

    python -m fakes.anthropic_server --port 8765 --delay 0.5
    ANTHROPIC_BASE_URL=http://127.0.0.1:8765 ANTHROPIC_API_KEY=test ...
"""

from __future__ import annotations

import argparse
import hashlib
import html
import itertools
import json
import re
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fakes.http_base import DISCONNECT_ERRORS as _DISCONNECT_ERRORS
from fakes.http_base import FakeHandler, FakeServer
from fakes.languages import FRENCH, Phrasebook, asked_language

__all__ = [
    "FakeAnthropic",
    "HttpError",
    "MindState",
    "RawStream",
    "Reply",
    "StreamCut",
    "StreamError",
    "main",
    "recorded_stream",
    "scripted_mind",
]

CHUNK_SIZE = 20  # characters per text/thinking/input_json delta
_THINKING_TYPES = ("thinking", "redacted_thinking")

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
    # tool_use); when given, replaces text/thinking/redacted/tool_uses. A block with an
    # `input` (tool_use, server_tool_use) streams it as JSON deltas; one of another type
    # (web_search_tool_result, anything new) is sent whole in its content_block_start.
    blocks: list[dict] | None = None
    # Deltas of other types sent inside the text block, before its text (citations_delta).
    extra_deltas: list[dict] = field(default_factory=list)
    # End the stream after message_delta, without message_stop, as a proxy or a server
    # closing early does.
    no_message_stop: bool = False


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


@dataclass
class StreamCut:
    """A 200 stream that starts normally, emits ``text_before``, then loses its connection
    (no error event, no end of the chunked body), as a network drop mid-reply looks.

    For a non-streaming request the connection is dropped before any response."""

    text_before: str = "partial "


@dataclass
class RawStream:
    """A 200 stream whose body is `sse`, sent as it is: a recorded stream replayed byte for
    byte (fakes/streams/), or one of the shapes real servers send that `Reply` does not
    make (a tool call cut off inside its JSON, no `message_stop`, server-tool blocks)."""

    sse: bytes


Response = Reply | HttpError | StreamError | StreamCut | RawStream
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


def _final_en(label: str, quoted: str, n: int, confidence: float, cite: str) -> str:
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


def _final_block(
    label: str,
    subject: str,
    n: int,
    confidence: float,
    sources: Sequence[str] = (),
    *,
    book: Phrasebook | None = None,
) -> str:
    quoted = f"\u201c{subject}\u201d"
    cite = "".join(f" [{number}]" for number in sources[:2])
    return (book or ENGLISH).final(label, quoted, n, confidence, cite)


ENGLISH = Phrasebook(
    thoughts=_THOUGHT_TEMPLATES,
    questions=_QUESTION_TEMPLATES,
    reasons=_QUESTION_REASONS,
    line_of_inquiry="line of inquiry {k}",
    final=_final_en,
    plan_steps=(
        "Clarify what {topic} asks",
        "Gather evidence from notes and the web",
        "Test the strongest explanation against counterexamples",
        "Synthesise",
    ),
    plain="Noted. A brief reflection on {topic}: it is worth approaching step by step (#{n}).",
    progress="Looking for evidence on {subject}",
    scratch="Which of the sources found bear directly on {subject}? Check [1].",
)


def _phrasebook(body: dict, prompt: str, question: str | None) -> Phrasebook:
    """The language the request asks the reply to be in (fakes/languages.py)."""
    instructions = f"{_block_text(body.get('system'))}\n{prompt}"
    return FRENCH if asked_language(instructions, question or "") == "fr" else ENGLISH


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
    book = _phrasebook(body, prompt, question)
    if "THOUGHT:" in prompt and tools and "ANSWER:" not in prompt:
        used = _use_tools(state, tools, rounds, subject, book)
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

    if "GRADE: CORRECT | INCORRECT | NOT_ATTEMPTED" in prompt:
        # First: the graded answer is model text that may carry any of the markers below.
        _, n = state.bump("plain")
        text = _grade_answer(prompt)
    elif "VERDICT: supported | partial | unsupported" in prompt:
        _, n = state.bump("plain")
        text = _check_citations(prompt)
    elif "WEB QUERIES:" in prompt and "PLAN:" in prompt:
        _, n = state.bump("plans")
        steps = "\n".join(
            f"{i}. {step.format(topic=topic)}" for i, step in enumerate(book.plan_steps, 1)
        )
        text = (
            f"PLAN:\n{steps}\n"
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
        text = _final_block("ANSWER", subject, n, 0.78, _SOURCE_RE.findall(prompt), book=book)
    elif "SYNTHESIS:" in prompt:
        _, n = state.bump("syntheses")
        confidence = min(0.9, round(0.45 + 0.1 * (n - 1), 2))
        text = _final_block(
            "SYNTHESIS", subject, n, confidence, _SOURCE_RE.findall(prompt), book=book
        )
    elif "QUESTION:" in prompt:
        _, n = state.bump("questions")
        count = 3 if n % 2 else 2
        blocks = []
        for i in range(count):
            k = (n - 1) * 3 + i  # unique per block across calls
            template = book.questions[k % len(book.questions)]
            blocks.append(
                f"QUESTION: {template.format(focus=topic)} "
                f"({book.line_of_inquiry.format(k=k + 1)})\n"
                f"PRIORITY: {9 - k % 6}\n"
                f"WHY: {book.reasons[k % len(book.reasons)]}"
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
                f"THOUGHT: {book.thoughts[kind].format(focus=topic, n=k + 1)}\n"
                f"TYPE: {kind}\n"
                f"CONFIDENCE: {confidence:.2f}"
            )
        text = "\n---\n".join(blocks)
        if "<interactive>" in prompt:  # the prompt asks for the tag format: wrap the lines
            text = _tagged(text, topic, n, enhanced="<analysis>" in prompt)
    else:
        _, n = state.bump("plain")
        text = book.plain.format(topic=topic, n=n)
    return Reply(text=text, thinking=thinking)


# A citation check's passage block: data, whatever it says (bench/fakehost.py reads past it).
CHECK_PASSAGE = re.compile(r'^<passage source="(\d+)"[^>]*>\n(.*?)\n</passage>$', re.M | re.S)
_CLAIM_RE = re.compile(r'^<claim k="(\d+)" source="(\d+)">(.*)</claim>$', re.MULTILINE)
_WORD_RE = re.compile(r"[a-z0-9]{4,}")


def _check_citations(prompt: str) -> str:
    """A naive but honest checker: a claim is supported when most of its longer words are in
    the passage of the source it cites, partial when some are, unsupported otherwise. A
    claim whose source's passage is not in the prompt is not judged (as a model could not)."""
    passages = {number: text for number, text in CHECK_PASSAGE.findall(prompt)}
    # Claims are read outside the passages only: a passage is data, whatever it says.
    outside = CHECK_PASSAGE.sub("", prompt)
    blocks = []
    for k, number, claim in _CLAIM_RE.findall(outside):
        if number not in passages:
            continue
        words = set(_WORD_RE.findall(claim.lower()))
        found = words & set(_WORD_RE.findall(passages[number].lower()))
        share = len(found) / len(words) if words else 0.0
        verdict = "supported" if share >= 0.6 else "partial" if share >= 0.3 else "unsupported"
        blocks.append(
            f"CLAIM: {k}\nVERDICT: {verdict}\n"
            f"WHY: {len(found)} of the claim's {len(words)} key words are in the passage."
        )
    return "\n---\n".join(blocks) or "No claims to check."


_REFERENCE_RE = re.compile(r"<reference_answer>(.*?)</reference_answer>", re.S)
_PREDICTED_RE = re.compile(r"<predicted_answer>(.*?)</predicted_answer>", re.S)
_HEDGES = ("don't know", "do not know", "cannot determine", "can't determine", "not sure",
           "unable to", "no answer", "could not find", "cannot say")  # fmt: skip


def _grade_answer(prompt: str) -> str:
    """A naive but honest grader, in the evaluation's format (evaluation/grading.py):
    correct when every longer word and number of the reference is in the predicted answer,
    not attempted when the answer only hedges, incorrect otherwise. The blocks are escaped
    data: read as such, never as instructions."""
    reference = _REFERENCE_RE.search(prompt)
    predicted = _PREDICTED_RE.search(prompt)
    if reference is None or predicted is None:
        return "GRADE: NOT_ATTEMPTED\nWHY: There is no answer to grade."
    wanted = set(re.findall(r"[a-z0-9]{2,}", html.unescape(reference.group(1)).lower()))
    answer = html.unescape(predicted.group(1)).lower()
    found = wanted & set(re.findall(r"[a-z0-9]{2,}", answer))
    if wanted and found == wanted:
        return "GRADE: CORRECT\nWHY: The answer states the reference answer."
    if any(hedge in answer for hedge in _HEDGES) and not found:
        return "GRADE: NOT_ATTEMPTED\nWHY: The answer does not commit to an answer."
    return (
        "GRADE: INCORRECT\n"
        f"WHY: The answer has {len(found)} of the reference's {len(wanted)} key terms."
    )


def _use_tools(
    state: MindState, tools: set, rounds: int, subject: str, book: Phrasebook | None = None
) -> Reply | None:
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
                        "message": (book or ENGLISH).progress.format(subject=_shorten(subject, 60)),
                        "plan_step": 2,
                    },
                }
            )
        return Reply(text="Let me look for evidence first.", tool_uses=uses)
    if rounds == 1 and "think" in tools:
        note = (book or ENGLISH).scratch.format(subject=_shorten(subject, 60))
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


MAX_CACHE_BREAKPOINTS = 4
# The API looks this many blocks back from each breakpoint for an earlier cache entry.
CACHE_LOOKBACK_BLOCKS = 20
# Sampling parameters that API version 2026-10-21 refuses, even at default values.
REMOVED_PARAMS = ("temperature", "top_p", "top_k")


def _refuse_messages(messages: object) -> str:
    """The API validates each message's shape: a role of user or assistant, content, and
    nothing else."""
    if not isinstance(messages, list) or not messages:
        return "messages: Field required"
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            return f"messages.{index}: Input should be a valid dictionary"
        if message.get("role") not in ("user", "assistant"):
            return f"messages.{index}.role: Input should be 'user' or 'assistant'"
        if "content" not in message:
            return f"messages.{index}.content: Field required"
        extra = sorted(set(message) - {"role", "content"})
        if extra:
            return f"messages.{index}.{extra[0]}: Extra inputs are not permitted"
        for position, block in enumerate(_blocks_of(message, "tool_result")):
            where = f"messages.{index}.content.{position}"
            if not isinstance(block.get("tool_use_id"), str):
                return f"{where}.tool_use_id: Field required"
            if "is_error" in block and not isinstance(block["is_error"], bool):
                return f"{where}.is_error: Input should be a valid boolean"
    for index in range(len(messages)):
        problem = _refuse_tool_results(messages, index)
        if problem:
            return problem
    return ""


def _blocks_of(message: dict | None, kind: str) -> list[dict]:
    content = message.get("content") if message else None
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == kind]


def _refuse_tool_results(messages: list, index: int) -> str:
    """Each tool_use of an assistant message needs a tool_result with its id in the next
    message, and each tool_result answers a tool_use of the message before it."""
    message = messages[index]
    if message["role"] == "assistant":
        after = messages[index + 1] if index + 1 < len(messages) else None
        answered = {b.get("tool_use_id") for b in _blocks_of(after, "tool_result")}
        missing = [b.get("id") for b in _blocks_of(message, "tool_use")]
        missing = [str(i) for i in missing if i not in answered]
        if missing:
            return (
                f"messages.{index}: `tool_use` ids were found without `tool_result` blocks "
                f"immediately after: {', '.join(missing)}. Each `tool_use` block must have a "
                "corresponding `tool_result` block in the next message."
            )
        return ""
    before = messages[index - 1] if index > 0 else None
    asked = {b.get("id") for b in _blocks_of(before, "tool_use")}
    for position, block in enumerate(_blocks_of(message, "tool_result")):
        if block["tool_use_id"] not in asked:
            return (
                f"messages.{index}.content.{position}: unexpected `tool_use_id` found in "
                f"`tool_result` blocks: {block['tool_use_id']}. Each `tool_result` block must "
                "have a corresponding `tool_use` block in the previous message."
            )
    return ""


def min_cacheable_tokens(model: str) -> int:
    """The shortest prefix the prompt cache stores (per the reference: 512 on the 5.5
    models, 2048 on older Haiku, 1024 otherwise)."""
    if model.endswith("-5-5"):
        return 512
    if "haiku" in model:
        return 2048
    return 1024


@dataclass(frozen=True)
class _Prefix:
    tokens: int
    key: str
    breakpoint: bool


def _prefixes(body: dict) -> list[_Prefix]:
    """Every block boundary of a request in cache order (tools -> system -> messages), with
    the prefix's size and a key over its exact bytes. Message prefixes also depend on the
    thinking and tool_choice settings, which invalidate message cache entries when changed."""
    model = str(body.get("model"))
    settings = json.dumps([body.get("thinking"), body.get("tool_choice")])
    out: list[_Prefix] = []
    digest = hashlib.sha256(model.encode())
    size = 0
    blocks: list[tuple[object, bool]] = [(tool, False) for tool in body.get("tools") or []]
    system = body.get("system")
    blocks += [(b, False) for b in (system if isinstance(system, list) else [system]) if b]
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        role = message.get("role") if isinstance(message, dict) else None
        for block in content if isinstance(content, list) else [content]:
            blocks.append(({"role": role, "block": block}, True))
    settings_added = False
    for block, in_messages in blocks:
        if in_messages and not settings_added:
            digest.update(settings.encode())
            settings_added = True
        inner = block.get("block") if in_messages and isinstance(block, dict) else block
        marked = isinstance(inner, dict) and bool(inner.get("cache_control"))
        if marked:
            # The marker is not content: moving a breakpoint later keeps earlier entries.
            bare = {k: v for k, v in inner.items() if k != "cache_control"}  # type: ignore[union-attr]
            block = {**block, "block": bare} if in_messages else bare  # type: ignore[dict-item]
        raw = json.dumps(block)  # exact bytes, in the order the client sent them
        digest.update(raw.encode())
        # Tokens of the block itself (not of the role tag the key adds), as `_usage` counts.
        size += len(json.dumps(block["block"] if in_messages else block))  # type: ignore[index]
        out.append(_Prefix(size // 4, digest.copy().hexdigest(), marked))
    return out


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
            deltas = [*reply.extra_deltas]
            deltas += [{"type": "text_delta", "text": c} for c in _chunks(block["text"])]
        elif "input" not in block:  # a server tool's result, or a type yet to come: whole
            start, deltas = block, []
        else:  # tool_use, server_tool_use
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
    if not reply.no_message_stop:
        yield _sse("message_stop", {"type": "message_stop"}), False


STREAMS = Path(__file__).parent / "streams"


def recorded_stream(name: str) -> RawStream:
    """A stream recorded in the API's wire format (fakes/streams/NAME.sse), to replay."""
    return RawStream((STREAMS / f"{name}.sse").read_bytes())


def _count_breakpoints(body: dict) -> int:
    count = 1 if body.get("cache_control") else 0  # automatic caching takes one
    blocks: list[object] = list(body.get("tools") or [])
    system = body.get("system")
    blocks += system if isinstance(system, list) else []
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        blocks += content if isinstance(content, list) else []
    return count + sum(1 for b in blocks if isinstance(b, dict) and b.get("cache_control"))


def model_info(
    model_id: str,
    *,
    thinking: Sequence[str] = ("adaptive", "disabled"),
    effort: Sequence[str] = (),
    max_tokens: int = 128_000,
) -> dict:
    """A Models API ``ModelInfo`` body, for ``fake.models[model_id]``."""
    yes, no = {"supported": True}, {"supported": False}
    return {
        "type": "model",
        "id": model_id,
        "display_name": model_id,
        "created_at": "2026-11-01T00:00:00Z",
        "max_input_tokens": 1_000_000,
        "max_tokens": max_tokens,
        "capabilities": {
            "effort": {
                "supported": bool(effort),
                **{level: yes if level in effort else no for level in _EFFORT_LEVELS},
            },
            "thinking": {
                "supported": bool(thinking),
                "types": {
                    name: yes if name in thinking else no
                    for name in ("adaptive", "enabled", "disabled", "between_tools")
                },
            },
        },
    }


_EFFORT_LEVELS = ("low", "medium", "high", "xhigh", "max")


def _fit_to_max_tokens(reply: Reply, max_tokens: object) -> Reply:
    """Cut a reply off at ``max_tokens`` (thinking counts toward it), as the API does."""
    if reply.blocks is not None or not isinstance(max_tokens, int) or max_tokens <= 0:
        return reply
    room = max_tokens * 4  # characters, at the fake's 4 characters a token
    thinking = reply.thinking or ""
    if len(thinking) + len(reply.text) <= room:
        return reply
    kept_thinking = thinking[:room]
    text = reply.text[: max(0, room - len(kept_thinking))]
    return replace(
        reply,
        thinking=kept_thinking if reply.thinking is not None else None,
        text=text,
        tool_uses=[],
        stop_reason="max_tokens",
        output_tokens=max_tokens,
    )


# --------------------------------------------------------------------------------------
# HTTP server
# --------------------------------------------------------------------------------------


class _Handler(FakeHandler):
    server_version = "FakeAnthropic/1.0"

    def _read_body(self) -> bytes:
        return self.read_body()

    def _send_json(
        self, status: int, payload: dict, request_id: str, extra: dict | None = None
    ) -> None:
        self.send_json(status, payload, {"request-id": request_id, **(extra or {})})

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
            if path == "/v1/models" and fake.models:
                listed = [
                    {k: info[k] for k in ("type", "id", "display_name", "created_at")}
                    for info in fake.models.values()
                ]
                page = {
                    "data": listed,
                    "has_more": False,
                    "first_id": listed[0]["id"],
                    "last_id": listed[-1]["id"],
                }
                self._send_json(200, page, fake._request_id())
            elif path.startswith("/v1/models/") and model_id in fake.models:
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
        refusal = fake._refuse(body)
        if refusal:
            self._send_error(400, "invalid_request_error", refusal, request_id)
            return
        response = fake._next_response(body)
        if isinstance(response, Reply):
            response = _fit_to_max_tokens(response, body.get("max_tokens"))
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
        if isinstance(response, RawStream) and not streaming:
            self._send_error(400, "invalid_request_error", "a recorded stream", request_id)
            return
        if isinstance(response, StreamCut) and not streaming:
            self.close_connection = True
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
        if isinstance(response, StreamCut):
            self._stream_cut(response, n, model, len(raw), request_id)
            return
        if isinstance(response, RawStream):
            self._start_stream(request_id)
            self._write_chunk(response.sse)
            self._write_chunk(b"")
            return
        usage = _usage(response, len(raw), fake._cache_lookup(body))
        fake._count_usage(usage)
        fake._remember(_content_blocks(response, n))
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
        self._stream_start(error.text_before, n, model, body_len, request_id)
        self._write_chunk(_sse("error", _error_body(error.type, error.message, request_id)))
        self._write_chunk(b"")

    def _stream_cut(
        self, cut: StreamCut, n: int, model: str, body_len: int, request_id: str
    ) -> None:
        self._stream_start(cut.text_before, n, model, body_len, request_id)
        self.wfile.flush()
        # The peer sees the body end mid-chunk-stream: a reset, not a finished reply.
        self.connection.shutdown(socket.SHUT_RDWR)
        self.close_connection = True

    def _stream_start(
        self, text_before: str, n: int, model: str, body_len: int, request_id: str
    ) -> None:
        """A stream's opening (message_start, ping) and `text_before` as a text block's
        deltas: what a failed stream sent before it failed."""
        reply = Reply(text=text_before)
        usage = _usage(reply, body_len)
        self._start_stream(request_id)
        events = _stream_events(reply, n, model, usage)
        for data, _ in itertools.islice(events, 2):  # message_start, ping
            self._write_chunk(data)
        if text_before:
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
            for piece in _chunks(text_before):
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


# --------------------------------------------------------------------------------------
# Public façade
# --------------------------------------------------------------------------------------


class FakeAnthropic(FakeServer):
    """A local Anthropic Messages API. Use ``start()``/``stop()`` or ``with FakeAnthropic():``.

    As strict as the real API where it matters: sampling parameters, more than four cache
    breakpoints, thinking types a listed model does not take, invalid manual budgets,
    messages of the wrong shape, a tool_use without its tool_result (or a stray one), and
    thinking blocks changed or dropped inside a tool loop are all refused with the API's
    400 ``invalid_request_error``.

    A local Anthropic-compatible server (Ollama's /v1/messages, a model without those
    features) is imitated by switching features off: ``takes_thinking = False`` refuses a
    thinking request and ``takes_tools = False`` tool definitions, each with a 400 in
    Ollama's words; ``caches_prompts = False`` ignores cache breakpoints (no cache tokens).
    With ``models`` empty (the default) there is no Models API either.
    """

    handler_class = _Handler
    thread_name = "fake-anthropic"

    def __init__(
        self, *, delay: float = 0.0, host: str = "127.0.0.1", port: int = 0, verbose: bool = False
    ) -> None:
        super().__init__(delay=delay, host=host, port=port, verbose=verbose)
        self.requests: list[dict] = []
        # Model id -> a Models API ModelInfo body; unknown ids answer 404 like local servers.
        self.models: dict[str, dict] = {}
        # Prompt-cache accounting: cache entries written, and input tokens by kind.
        self._cached_prefixes: set[str] = set()
        # Thinking blocks this server issued (signature -> text; redacted data), and the
        # thinking blocks of the message that issued each tool_use id.
        self._signatures: dict[str, str] = {}
        self._redacted: set[str] = set()
        self._thinking_of_tool_use: dict[str, list[dict]] = {}
        self.usage_totals = {"input_tokens": 0, "cache_read": 0, "cache_write": 0}
        self.takes_thinking = True
        self.takes_tools = True
        self.caches_prompts = True
        self.mind = MindState()
        self.responder: Responder = self.scripted_mind
        self._queue: deque[Response] = deque()
        self._serial = 0
        self._request_serial = 0

    # -- prompt cache ------------------------------------------------------------------

    def _cache_lookup(self, body: dict) -> tuple[int, int]:
        """(tokens read, tokens written), as the API's prompt cache does it: an entry is
        written at each breakpoint whose prefix is long enough; a request reads the longest
        earlier entry that matches its exact bytes at a block boundary up to 20 blocks
        before one of its breakpoints; the rest up to its last breakpoint is written."""
        prefixes = _prefixes(body)
        marks = [i for i, prefix in enumerate(prefixes) if prefix.breakpoint]
        if not marks or not self.caches_prompts:
            return 0, 0
        minimum = min_cacheable_tokens(str(body.get("model")))
        with self._lock:
            read = 0
            for mark in marks:
                for i in range(mark, max(-1, mark - CACHE_LOOKBACK_BLOCKS - 1), -1):
                    if prefixes[i].key in self._cached_prefixes:
                        read = max(read, prefixes[i].tokens)
                        break
            for mark in marks:
                if prefixes[mark].tokens >= minimum:
                    self._cached_prefixes.add(prefixes[mark].key)
        last = prefixes[marks[-1]].tokens
        return read, (max(0, last - read) if last >= minimum else 0)

    def _refuse(self, body: dict) -> str:
        """The API's 400 message for a request it would refuse; "" when it is acceptable."""
        for name in REMOVED_PARAMS:
            if name in body:
                return f"{name}: Extra inputs are not permitted"
        model = body.get("model")
        thinking_asked = (body.get("thinking") or {}).get("type") in ("enabled", "adaptive")
        if thinking_asked and not self.takes_thinking:
            return f'"{model}" does not support thinking'
        if body.get("tools") and not self.takes_tools:
            return f"registry.ollama.ai/library/{model} does not support tools"
        problem = _refuse_messages(body.get("messages"))
        if problem:
            return problem
        breakpoints = _count_breakpoints(body)
        if breakpoints > MAX_CACHE_BREAKPOINTS:
            return (
                f"A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be "
                f"provided. Found {breakpoints}."
            )
        thinking = body.get("thinking") if isinstance(body.get("thinking"), dict) else None
        if thinking is not None:
            problem = self._refuse_thinking(body, thinking)
            if problem:
                return problem
        return self._refuse_thinking_blocks(body, thinking)

    def _refuse_thinking(self, body: dict, thinking: dict) -> str:
        kind = thinking.get("type")
        if kind == "enabled":
            budget = thinking.get("budget_tokens")
            if not isinstance(budget, int) or budget < 1024:
                return (
                    "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
                )
            max_tokens = body.get("max_tokens")
            if isinstance(max_tokens, int) and budget >= max_tokens:
                return "`max_tokens` must be greater than `thinking.budget_tokens`."
        info = self.models.get(str(body.get("model")))
        types = ((info or {}).get("capabilities") or {}).get("thinking", {}).get("types")
        if isinstance(types, dict) and kind in types and not types[kind].get("supported"):
            return f"thinking.type: '{kind}' is not supported for model {body.get('model')}."
        return ""

    def _refuse_thinking_blocks(self, body: dict, thinking: dict | None) -> str:
        """Thinking blocks sent back must be exactly the ones issued, and within the turn in
        progress (assistant turns after the last user text) each assistant message that
        carried thinking must carry it again, unchanged and first."""
        messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
        turn_start = 0
        for index, message in enumerate(messages):
            content = message.get("content")
            blocks = content if isinstance(content, list) else [content]
            if message.get("role") == "user" and not all(
                isinstance(b, dict) and b.get("type") == "tool_result" for b in blocks
            ):
                turn_start = index + 1
        for index, message in enumerate(messages):
            if message.get("role") != "assistant" or not isinstance(message.get("content"), list):
                continue
            content = message["content"]
            with self._lock:
                for position, block in enumerate(content):
                    where = f"messages.{index}.content.{position}"
                    if not isinstance(block, dict):
                        continue
                    if block.get("type") == "thinking":
                        signature = block.get("signature")
                        if self._signatures.get(signature) != block.get("thinking"):
                            return f"{where}: Invalid `signature` in `thinking` block"
                    elif (
                        block.get("type") == "redacted_thinking"
                        and block.get("data") not in self._redacted
                    ):
                        return f"{where}: Invalid `data` in `redacted_thinking` block"
                if index < turn_start or thinking is None:
                    continue
                uses = [
                    b.get("id")
                    for b in content
                    if isinstance(b, dict) and b.get("type") == "tool_use"
                ]
                issued = next(
                    (
                        self._thinking_of_tool_use[u]
                        for u in uses
                        if u in self._thinking_of_tool_use
                    ),
                    None,
                )
            if issued:
                sent = [
                    b for b in content if isinstance(b, dict) and b.get("type") in _THINKING_TYPES
                ]
                first = content[0] if content and isinstance(content[0], dict) else {}
                if sent != issued or first.get("type") not in _THINKING_TYPES:
                    return (
                        f"messages.{index}.content.0.type: Expected `thinking` or "
                        "`redacted_thinking`, but found "
                        f"`{first.get('type', 'nothing')}`. When `thinking` is enabled, a final "
                        "`assistant` message must start with a thinking block (preceding the "
                        "lastmost set of `tool_use` and `tool_result` blocks). To avoid this "
                        "requirement, disable `thinking`."
                    )
        return ""

    def _remember(self, blocks: list[dict]) -> None:
        """Note the thinking blocks issued, so they can be checked when sent back."""
        thinking = [b for b in blocks if b.get("type") in _THINKING_TYPES]
        with self._lock:
            for block in thinking:
                if block["type"] == "thinking":
                    self._signatures[block.get("signature", "")] = block.get("thinking", "")
                else:
                    self._redacted.add(block.get("data", ""))
            for block in blocks:
                if block.get("type") == "tool_use" and thinking:
                    self._thinking_of_tool_use[block["id"]] = [dict(b) for b in thinking]

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
            self._signatures.clear()
            self._redacted.clear()
            self._thinking_of_tool_use.clear()
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
