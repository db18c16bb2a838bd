"""Numbers in messages people read, with the noun that agrees with them."""

from __future__ import annotations

from django.utils.translation import ngettext


def counted(n: float, singular: str, plural: str = "") -> str:
    """ "1 minute", "2 minutes", "0.5 minutes": the number (as `:g` writes it) and the
    noun in the form it takes (Django's `ngettext`; the plural defaults to singular + s)."""
    return f"{n:g} {ngettext(singular, plural or f'{singular}s', n)}"
