"""Pure functions from a model's reply text to typed results.

Thought replies are read in the session's tag format first (`thinking.provider.tags`), then in the
seed's line formats (THOUGHT:/TYPE:/CONFIDENCE:, ...), then as prose. Replies are untrusted and
often imperfect: markdown bold around labels, percentages, missing fields, prose around the
blocks. Every parser degrades to sensible defaults and never raises.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field

from thinking.provider import tags

THOUGHT_TYPES = ("exploration", "critique", "connection", "insight")
DEFAULT_CONFIDENCE = 0.5
DEFAULT_PRIORITY = 5
MAX_THOUGHTS = 5
MAX_QUESTIONS = 3
MAX_FIELD_CHARS = 20_000


@dataclass(frozen=True)
class ParsedThought:
    text: str
    type: str = "exploration"
    confidence: float = DEFAULT_CONFIDENCE


@dataclass(frozen=True)
class ParsedQuestion:
    text: str
    priority: int = DEFAULT_PRIORITY
    why: str = ""


@dataclass(frozen=True)
class ParsedSynthesis:
    text: str
    key_insights: list[str] = field(default_factory=list)
    confidence: float = DEFAULT_CONFIDENCE
    remaining_questions: list[str] = field(default_factory=list)


# A label at the start of a line, tolerating markdown decoration: "**THOUGHT:**", "## Type:".
_LABEL = r"^[ \t>*#_\-]*{name}[ \t*_]*:[ \t*_]*"
_SEPARATOR = re.compile(r"^[ \t]*(?:-{3,}|\*{3,}|_{3,})[ \t]*$", re.MULTILINE)
_NUMBER = re.compile(r"[-+]?\d+(?:[.,]\d+)?(?:[eE][-+]?\d+)?")


def _label(name: str) -> re.Pattern[str]:
    return re.compile(_LABEL.format(name=name), re.IGNORECASE | re.MULTILINE)


_THOUGHT, _TYPE, _CONFIDENCE = _label("THOUGHT"), _label("TYPE"), _label("CONFIDENCE")
_QUESTION, _PRIORITY, _WHY = _label("QUESTION"), _label("PRIORITY"), _label("WHY")
_SYNTHESIS, _ANSWER = _label("SYNTHESIS"), _label("ANSWER")
_INSIGHTS, _REMAINING = _label(r"(?:KEY[ _]?)?INSIGHTS"), _label(r"REMAINING(?:[ _]QUESTIONS)?")


def clamp_confidence(raw: str | float | None) -> float:
    """A confidence in [0, 1]: '0.7', '70%', '7/10', 7 and 70 all read as 0.7."""
    if raw is None:
        return DEFAULT_CONFIDENCE
    if isinstance(raw, int | float):
        value = float(raw)
    else:
        text = raw.strip()
        match = _NUMBER.search(text)
        if not match:
            return DEFAULT_CONFIDENCE
        value = float(match.group().replace(",", "."))
        rest = text[match.end() :].lstrip()
        if re.match(r"[-\u2013]\s*\d", rest):
            return DEFAULT_CONFIDENCE  # a range echoed from the format ("0.0-1.0") says nothing
        if rest.startswith("%"):
            value /= 100
        elif rest.startswith("/"):
            denominator = _NUMBER.match(rest[1:].lstrip())
            if denominator and float(denominator.group().replace(",", ".")) > 0:
                value /= float(denominator.group().replace(",", "."))
    if value != value:  # NaN
        return DEFAULT_CONFIDENCE
    # Models sometimes answer on a 10- or 100-point scale.
    if 1 < value <= 10:
        value /= 10
    elif 10 < value <= 100:
        value /= 100
    return round(min(1.0, max(0.0, value)), 4)


def clamp_priority(raw: str | int | None) -> int:
    """A priority in 1..10; missing or unreadable is the middle."""
    if raw is None:
        return DEFAULT_PRIORITY
    if isinstance(raw, int):
        value = float(raw)
    else:
        match = _NUMBER.search(raw)
        if not match:
            return DEFAULT_PRIORITY
        value = float(match.group().replace(",", "."))
    return int(min(10, max(1, round(value))))


def normalize_type(raw: str | None) -> str:
    if not raw:
        return "exploration"
    word = raw.strip().strip("[]*_`\"'").lower()
    for known in THOUGHT_TYPES:
        if word.startswith(known[:5]):  # "critic", "connect", "insightful", "explore"
            return known
    return "exploration"


def _clean(text: str) -> str:
    text = text.strip().strip("*_").strip()
    return text[:MAX_FIELD_CHARS]


def _fields(block: str, labels: dict[str, re.Pattern[str]]) -> dict[str, str]:
    """Split a block into labelled fields; a field runs until the next known label."""
    hits: list[tuple[int, int, str]] = []
    for name, pattern in labels.items():
        for match in pattern.finditer(block):
            hits.append((match.start(), match.end(), name))
    hits.sort()
    found: dict[str, str] = {}
    for index, (_start, end, name) in enumerate(hits):
        stop = hits[index + 1][0] if index + 1 < len(hits) else len(block)
        if name not in found:  # first occurrence wins
            found[name] = block[end:stop]
    return found


def _blocks(text: str, first_label: re.Pattern[str]) -> list[str]:
    """Blocks separated by '---' lines, or, failing that, by each new leading label."""
    parts = [part for part in _SEPARATOR.split(text) if part.strip()]
    if len(parts) <= 1:
        starts = [m.start() for m in first_label.finditer(text)]
        if len(starts) > 1:
            parts = [text[a:b] for a, b in zip(starts, [*starts[1:], len(text)], strict=True)]
    return parts


def parse_thoughts(text: str, *, limit: int = MAX_THOUGHTS) -> list[ParsedThought]:
    """THOUGHT:/TYPE:/CONFIDENCE: blocks. A reply with no THOUGHT label at all becomes one
    exploration thought at the default confidence, so nothing the model said is dropped."""
    text = (text or "").strip()
    if not text:
        return []
    labels = {"thought": _THOUGHT, "type": _TYPE, "confidence": _CONFIDENCE}
    thoughts: list[ParsedThought] = []
    for block in _blocks(text, _THOUGHT):
        fields = _fields(block, labels)
        body = _clean(fields.get("thought", ""))
        if not body:
            continue
        thoughts.append(
            ParsedThought(
                text=body,
                type=normalize_type(fields.get("type")),
                confidence=clamp_confidence(fields.get("confidence")),
            )
        )
    if not thoughts and not _THOUGHT.search(text) and _clean(text):
        thoughts.append(ParsedThought(text=_clean(text)))
    return thoughts[:limit]


def parse_questions(text: str, *, limit: int = MAX_QUESTIONS) -> list[ParsedQuestion]:
    """QUESTION:/PRIORITY:/WHY: blocks. Without any QUESTION label there are no questions:
    unlike thoughts, free prose is not a question worth queueing."""
    labels = {"question": _QUESTION, "priority": _PRIORITY, "why": _WHY}
    questions: list[ParsedQuestion] = []
    for block in _blocks((text or "").strip(), _QUESTION):
        fields = _fields(block, labels)
        body = _clean(fields.get("question", ""))
        if not body:
            continue
        questions.append(
            ParsedQuestion(
                text=body,
                priority=clamp_priority(fields.get("priority")),
                why=_clean(fields.get("why", "")),
            )
        )
    return questions[:limit]


def _bullets(section: str) -> list[str]:
    items = []
    for line in section.splitlines():
        item = re.sub(r"^[ \t]*(?:[-*•]|\d+[.)])[ \t]*", "", line).strip()
        if item and item.lower() not in {"none", "n/a", "-"}:
            items.append(item[:1000])
    return items[:20]


def parse_synthesis(text: str) -> ParsedSynthesis:
    """SYNTHESIS: (or ANSWER:) / INSIGHTS: / CONFIDENCE: / REMAINING:. Without labels the
    whole reply is the synthesis at the default confidence."""
    text = (text or "").strip()
    labels = {
        "text": _SYNTHESIS,
        "answer": _ANSWER,
        "insights": _INSIGHTS,
        "confidence": _CONFIDENCE,
        "remaining": _REMAINING,
    }
    fields = _fields(text, labels)
    body = _clean(fields.get("answer") or fields.get("text") or "")
    if not body:
        # No body label: everything before the first other label (or the whole reply).
        first = min(
            (m.start() for p in labels.values() for m in [p.search(text)] if m),
            default=len(text),
        )
        body = _clean(text[:first]) or _clean(text)
    return ParsedSynthesis(
        text=body,
        key_insights=_bullets(fields.get("insights", "")),
        confidence=clamp_confidence(fields.get("confidence")),
        remaining_questions=_bullets(fields.get("remaining", "")),
    )


def question_key(text: str) -> str:
    """A normal form for spotting duplicate sub-questions: case, accents, punctuation and
    spacing do not make a question new."""
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode().lower()
    words = re.findall(r"[a-z0-9]+", folded)
    return " ".join(words)


def question_digest(text: str) -> str:
    """`question_key` as 32 hex digits, or "" for a text with no words: what a sub-question
    row keeps (`SubQuestion.text_key`), so a duplicate is found through an index, however
    long the question, instead of by reading every row's text. Stored keys follow this
    function: a change to it (or to `question_key`) needs a migration that keys the rows
    again, or duplicates of older questions slip through."""
    key = question_key(text)
    return hashlib.sha256(key.encode()).hexdigest()[:32] if key else ""


@dataclass(frozen=True)
class ThoughtReply:
    """A thought-cycle reply read in the session's format, with how it was read."""

    thoughts: list[ParsedThought]
    parts: dict[str, str] = field(default_factory=dict)
    stop_signal: bool | None = None
    route: str = "lines"  # "tags", "lines", "prose" or "empty"
    errors: list[str] = field(default_factory=list)


def read_thought_reply(
    text: str, *, mode: str, custom: Sequence[tags.TagSpec] | None = None
) -> ThoughtReply:
    """Tags first (the session's mode), then the THOUGHT:/TYPE:/CONFIDENCE: lines, then the
    whole reply as one exploration thought. Never raises."""
    text = text or ""
    try:
        structured = tags.parse_structured(text, mode, custom)
    except ValueError as error:  # an unknown mode or a missing custom spec: read as lines
        structured = tags.StructuredReply(mode=mode, errors=[str(error)])
    stop = structured.stop_signal
    if stop is None:
        stop = tags.find_stop_signal(text)
    if structured.found:
        body = structured.response if structured.response is not None else text
        return ThoughtReply(
            thoughts=parse_thoughts(body),
            parts={k: v for k, v in structured.parts.items() if v},
            stop_signal=stop,
            route="tags",
            errors=structured.errors,
        )
    thoughts = parse_thoughts(text)
    if not thoughts:
        route = "empty"
    elif _THOUGHT.search(text):
        route = "lines"
    else:
        route = "prose"
    return ThoughtReply(thoughts=thoughts, stop_signal=stop, route=route)


# --- re-ranking sub-questions (seed 000's prioritize_questions) ------------------------

_QUESTION_ID = _label(r"QUESTION[ _]?ID")
_ID = re.compile(r"\d+")


@dataclass(frozen=True)
class ParsedRanking:
    question_id: int
    priority: int
    why: str = ""


def parse_rankings(text: str, *, known: Sequence[int] = ()) -> list[ParsedRanking]:
    """QUESTION_ID:/PRIORITY:/WHY: blocks. An id may be written `12`, `[12]` or `#12`; a block
    without a readable id or priority, or (with `known`) for an id not asked about, is
    dropped; the first block for an id wins. Never raises."""
    labels = {"id": _QUESTION_ID, "priority": _PRIORITY, "why": _WHY}
    allowed = set(known)
    rankings: list[ParsedRanking] = []
    seen: set[int] = set()
    for block in _blocks((text or "").strip(), _QUESTION_ID):
        fields = _fields(block, labels)
        found = _ID.search(fields.get("id", ""))
        if not found or not _NUMBER.search(fields.get("priority", "")):
            continue
        question_id = int(found.group())
        if question_id in seen or (allowed and question_id not in allowed):
            continue
        seen.add(question_id)
        rankings.append(
            ParsedRanking(
                question_id=question_id,
                priority=clamp_priority(fields.get("priority")),
                why=_clean(fields.get("why", ""))[:500],
            )
        )
    return rankings
