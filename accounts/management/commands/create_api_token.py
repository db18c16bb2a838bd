"""`python manage.py create_api_token USERNAME [--name NAME]`: prints a new personal API
token, and only the token, so a script can capture it: TOKEN=$(… create_api_token alice)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.models import ApiToken
from accounts.tokens import create_token


class Command(BaseCommand):
    help = "Create a personal API token for a user and print it (shown only this once)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="Command line", help="What will use it.")

    def handle(self, *args: Any, username: str, name: str, **options: Any) -> None:
        user_model = get_user_model()
        try:
            user = user_model._default_manager.get_by_natural_key(username)
        except user_model.DoesNotExist:
            raise CommandError(f"There is no user {username!r}.") from None
        if not user.is_active:
            raise CommandError(f"{username!r} is inactive: the API would refuse the token.")
        limit = ApiToken._meta.get_field("name").max_length or 100
        if not name.strip() or len(name) > limit:
            raise CommandError(f"--name must be 1 to {limit} characters.")
        _, secret = create_token(user, name.strip())
        self.stdout.write(secret)
