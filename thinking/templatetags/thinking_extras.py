from __future__ import annotations

from django import template

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
