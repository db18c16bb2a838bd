from __future__ import annotations

import re
from collections.abc import Container

from django import template
from django.utils.html import conditional_escape, linebreaks
from django.utils.safestring import SafeString, mark_safe

register = template.Library()


@register.filter
def duration(seconds: float | None) -> str:
    """1:05, 12:30, 1h 02m: how people read a clock."""
    if seconds is None:
        return ""
    total = max(0, round(float(seconds)))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m"
    return f"{minutes}:{secs:02d}"


@register.filter
def percent(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{round(float(value) * 100)}%"


@register.filter
def level(value: float | None) -> str:
    """A word for a confidence, for colour and for screen readers."""
    if value is None:
        return "unknown"
    value = float(value)
    if value >= 0.75:
        return "high"
    if value >= 0.5:
        return "medium"
    return "low"


_PART_ORDER = ("analysis", "plan", "reasoning", "thinking")


@register.filter
def part_items(parts: dict[str, str] | None) -> list[tuple[str, str]]:
    """A thought's structured parts in reading order, with labels: analysis, plan, reasoning,
    then any custom parts."""
    if not parts:
        return []
    ordered = [name for name in _PART_ORDER if name in parts]
    ordered += sorted(name for name in parts if name not in _PART_ORDER)
    return [
        (name.replace("_", " ").replace(".", " / ").capitalize(), parts[name]) for name in ordered
    ]


_CITATION = re.compile(r"\[(\d{1,4})\]")


@register.filter(needs_autoescape=True)
def cited(text: str | None, numbers: Container[int] | None, autoescape: bool = True) -> SafeString:
    """Paragraphs of model text with [n] linked to source n when that source exists.

    The text is escaped first, so the only markup in the result is what this adds: links
    whose target is a number we generated. A citation with no such source stays plain text.
    """
    escaped = linebreaks(conditional_escape(text or ""))
    known = numbers or ()

    def link(match: re.Match[str]) -> str:
        number = int(match.group(1))
        if number not in known:
            return match.group(0)
        return f'<a class="cite" href="#source-{number}">[{number}]</a>'

    return mark_safe(_CITATION.sub(link, escaped))  # noqa: S308 - escaped above


@register.filter
def web_href(url: str | None) -> str:
    """A link target only for http(s) URLs; anything else (javascript:, data:) is dropped."""
    url = (url or "").strip()
    return url if url.lower().startswith(("http://", "https://")) else ""
