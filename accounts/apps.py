from __future__ import annotations

from django.apps import AppConfig


class AccountsConfig(AppConfig):
    """Teams and memberships, API tokens, login throttling and the account pages. The bottom
    of the dependency arrows: thinking -> research -> accounts."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "accounts"
