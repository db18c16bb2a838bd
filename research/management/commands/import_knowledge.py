"""Import a folder of documents (PDF, HTML, Markdown, text) into one person's knowledge base."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from research.knowledge import import_folder


class Command(BaseCommand):
    help = (
        "Import the PDF, HTML, Markdown and text files under PATH (recursively) as knowledge "
        "items of --owner, each split into passages. Each file is read in a process of its "
        "own within DEEPTHINK_KNOWLEDGE_READ_SECONDS and _READ_MEMORY_MB; a file that cannot "
        "be read is skipped with the reason and the rest goes on. The title is the "
        "document's own, else its first heading, else the file name. Files imported before "
        "are matched by path: unchanged ones are skipped, changed ones updated; a file with "
        "the same text as an item already there is not stored again."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", help="a folder of documents")
        parser.add_argument("--owner", required=True, help="the username that will own the items")

    def handle(self, *args: Any, **options: Any) -> None:
        root = Path(options["path"]).expanduser()
        if not root.exists():
            raise CommandError(f"There is no folder at {root}.")
        if not root.is_dir():
            raise CommandError(f"{root} is a file; give the folder that holds it.")
        User = get_user_model()
        username = options["owner"]
        try:
            owner = User.objects.get(**{User.USERNAME_FIELD: username})
        except User.DoesNotExist:
            raise CommandError(
                f"There is no user {username!r}; create one with `manage.py createsuperuser`."
            ) from None

        summary = import_folder(root, owner=owner)

        for label, names in (("new", summary.created), ("updated", summary.updated)):
            for name in names:
                self.stdout.write(f"  {label:<10} {name}")
                for note in summary.notes.get(name, []):
                    self.stdout.write(f"               note: {note}")
        for name, title in summary.duplicate:
            self.stdout.write(f"  same text  {name} (already imported as “{title}”)")
        for name, why in summary.skipped:
            self.stderr.write(f"  skipped    {name} ({why})")
        self.stdout.write(
            self.style.SUCCESS(f"Imported {root} for {username}: {summary.describe()}.")
        )
