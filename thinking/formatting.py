"""How numbers read on pages and in exports."""

from __future__ import annotations


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


def percent(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{round(float(value) * 100)}%"
