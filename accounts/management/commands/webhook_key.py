"""`python manage.py webhook_key USERNAME`: makes the user's webhook signing key (a new one
in place of any they had) and prints it, and only it, so a script can capture it."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts import webhook_secrets


class Command(BaseCommand):
    help = "Make a user's webhook signing key and print it (shown only this once)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")

    def handle(self, *args: Any, username: str, **options: Any) -> None:
        user_model = get_user_model()
        try:
            user = user_model._default_manager.get_by_natural_key(username)
        except user_model.DoesNotExist:
            raise CommandError(f"There is no user {username!r}.") from None
        self.stdout.write(webhook_secrets.rotate(user))
