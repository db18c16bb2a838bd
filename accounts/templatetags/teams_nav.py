"""The navigation's Teams link, with the invitations waiting for the person's answer, so an
invited person sees them from any page."""

from __future__ import annotations

from typing import Any

from django import template

from accounts import teams

register = template.Library()


@register.simple_tag
def pending_invitations(user: Any) -> int:
    return teams.pending_count(user)
