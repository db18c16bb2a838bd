"""How numbers read on pages and in exports."""

from __future__ import annotations

from django.utils.translation import ngettext


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


# Numbers in messages people read, with the noun that agrees with them.
def counted(n: float, singular: str, plural: str = "") -> str:
    """ "1 minute", "2 minutes", "0.5 minutes": the number (as `:g` writes it) and the
    noun in the form it takes (Django's `ngettext`; the plural defaults to singular + s)."""
    return f"{n:g} {ngettext(singular, plural or f'{singular}s', n)}"
