"""Who may see what. Every view, API route and consumer looks sessions up through here."""

from __future__ import annotations

import uuid

from django.http import Http404
from django.shortcuts import get_object_or_404

from thinking.models import ThinkingSession


def get_session_for(user: object, pk: uuid.UUID | str) -> ThinkingSession:
    """The session if this user may see it; otherwise 404, whether or not it exists."""
    return get_object_or_404(ThinkingSession.objects.visible_to(user), pk=pk)


def find_session_for(user: object, pk: uuid.UUID | str) -> ThinkingSession | None:
    try:
        return get_session_for(user, pk)
    except (Http404, ValueError):
        return None
