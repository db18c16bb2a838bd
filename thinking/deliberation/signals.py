"""The format's own signals (#12 item 7): a typed value the format supplies is used, and the
problems met while reading a reply are kept per cycle (`ThinkingSession.format_errors`) for
the admin and the JSON export instead of vanishing into a fallback.

A `<confidence type="number">0.8</confidence>` (in the interactive block, or anywhere in the
reply) is the reply's declared confidence: thoughts whose lines carry no CONFIDENCE of their
own take it, instead of the default.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from thinking.models import FormatMode, ThinkingSession
from thinking.provider import parsing, tags

logger = logging.getLogger(__name__)

MAX_CYCLES_KEPT = 200
MAX_ERRORS_PER_CYCLE = 10

_CONFIDENCE_SPEC = (tags.TagSpec("confidence", multiple=True),)
_CONFIDENCE_LINE = re.compile(r"^[ \t>*#_\-]*CONFIDENCE[ \t*_]*:", re.IGNORECASE | re.MULTILINE)


def typed_confidence(text: str) -> tuple[float | None, list[str]]:
    """The last `<confidence type="number">` value in `text`, clamped to 0..1, and any
    problem with it ("not a number"). A tag without a numeric type gives None."""
    problems: list[str] = []
    found: float | None = None
    for node in tags.extract(text or "", _CONFIDENCE_SPEC).get_all("confidence"):
        if node.type not in ("number", "integer", "float"):
            continue
        if isinstance(node.value, int | float) and not isinstance(node.value, bool):
            found = parsing.clamp_confidence(float(node.value))
        else:
            problems.append(f"confidence: {node.error or 'not a number'}")
    return found, problems


def read(
    text: str, *, mode: str, custom: Sequence[tags.TagSpec] | None = None
) -> parsing.ThoughtReply:
    """`parsing.read_thought_reply`, then the typed confidence applied and its problems kept."""
    reading = parsing.read_thought_reply(text, mode=mode, custom=custom)
    value, problems = typed_confidence(text)
    thoughts = reading.thoughts
    if value is not None and thoughts and not _CONFIDENCE_LINE.search(text or ""):
        thoughts = [replace(t, confidence=value) for t in thoughts]
    return replace(reading, thoughts=thoughts, errors=[*reading.errors, *problems])


def problems_of(reading: parsing.ThoughtReply) -> list[str]:
    """What went wrong reading a reply, in words: extraction errors and the fallbacks used."""
    problems = [str(e)[:300] for e in reading.errors]
    if reading.route == "prose":
        problems.append("no THOUGHT blocks: the whole reply was kept as one thought")
    elif reading.route == "empty":
        problems.append("the reply had no thoughts at all")
    return problems[:MAX_ERRORS_PER_CYCLE]


def changes_for(session: ThinkingSession, reading: parsing.ThoughtReply) -> dict[str, Any]:
    """The field change that stores this cycle's format problems (none: no change)."""
    problems = problems_of(reading)
    if not problems:
        return {}
    entry = {"cycle": session.cycles, "route": reading.route, "errors": problems}
    return {"format_errors": [*session.format_errors, entry][-MAX_CYCLES_KEPT:]}


def custom_spec(session: ThinkingSession) -> tuple[tags.TagSpec, ...] | None:
    """The session's custom tag spec; it was validated when the session was created."""
    if session.format_mode != FormatMode.CUSTOM or not session.format_spec:
        return None
    try:
        return tags.spec_from_json(session.format_spec)
    except tags.SpecError:
        logger.warning("Session %s has an invalid custom spec; reading lines", session.pk)
        return None


def reading_mode(session: ThinkingSession) -> tuple[str, tuple[tags.TagSpec, ...] | None]:
    """How the session's replies are read: its format, and its custom spec when valid (an
    invalid one is read as the enhanced format)."""
    spec = custom_spec(session)
    if session.format_mode == FormatMode.CUSTOM and spec is None:
        return FormatMode.ENHANCED, None
    return session.format_mode, spec
