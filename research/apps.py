from __future__ import annotations

from django.apps import AppConfig


class ResearchConfig(AppConfig):
    """Knowledge base, memory search and web search (issue #3). A leaf: it knows nothing of
    sessions or of Claude."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "research"
