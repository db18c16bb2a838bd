from __future__ import annotations

from django.apps import AppConfig


class ThinkingConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "thinking"
    verbose_name = "Thinking sessions"
