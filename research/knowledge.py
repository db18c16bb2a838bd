"""Writing the knowledge base: notes, uploaded and imported documents, session answers.

Everything that adds an item goes through `add_item` (or `save_item`, which also says what
happened), so titles and bodies are cleaned the same way wherever they come from, and every
item is split into passages (with their page or heading) that search and citations point to.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction

from accounts.models import Team

from . import documents
from .documents import Document, DocumentError, Section, read_document
from .models import KnowledgeItem, KnowledgeSource, Passage

# Every format a document may come in (research/documents.py), so the folder walk, the
# upload form and the API accept the same files.
TEXT_SUFFIXES = documents.SUFFIXES
TITLE_MAX = KnowledgeItem._meta.get_field("title").max_length or 300
# An ATX Markdown heading ("# Title", "## Title ##"), not a "#hashtag".
HEADING = re.compile(r"^\s{0,3}#{1,6}[ \t]+(?P<title>.+?)(?:[ \t]+#+)?[ \t]*$", re.MULTILINE)
# A setext heading: a line underlined with === or ---.
SETEXT_HEADING = re.compile(r"^(?P<title>[^\n]*\S[^\n]*)\n[ \t]*(?:=+|-+)[ \t]*$", re.MULTILINE)


class Change(enum.StrEnum):
    CREATED = "created"
    UPDATED = "updated"
    UNCHANGED = "unchanged"


@dataclass(frozen=True)
class Saved:
    item: KnowledgeItem
    change: Change


def max_upload_bytes() -> int:
    """The largest file the upload form and the API take."""
    return int(getattr(settings, "DEEPTHINK_KNOWLEDGE_MAX_UPLOAD_BYTES", 20_000_000))


def max_file_bytes() -> int:
    """The largest file `import_knowledge` reads; bigger ones are skipped with a message."""
    return int(getattr(settings, "DEEPTHINK_KNOWLEDGE_MAX_FILE_BYTES", 50_000_000))


def replace_passages(item: KnowledgeItem, sections: list[Section] | None = None) -> int:
    """Split `item` into passages (from `sections` when the document gave them, else from its
    Markdown headings) and store them in place of the old ones."""
    parts = documents.passages(sections or documents.markdown_sections(item.body))
    Passage.objects.filter(item=item).delete()
    Passage.objects.bulk_create(
        Passage(
            item=item,
            position=index,
            heading=clean_title(part.heading)[:300] if part.heading else "",
            page=part.page,
            text=clean_text(part.text),
        )
        for index, part in enumerate(parts)
    )
    return len(parts)


def clean_text(text: str) -> str:
    # PostgreSQL text cannot hold NUL; normalise line endings so re-imports compare equal.
    return text.replace("\x00", "").replace("\r\n", "\n").replace("\r", "\n").strip()


def clean_title(title: str, *, body: str = "") -> str:
    title = " ".join(title.split())
    if not title:
        first_line = next((line for line in body.splitlines() if line.strip()), "")
        title = " ".join(first_line.lstrip("#").split()) or "Untitled"
    if len(title) > TITLE_MAX:
        title = title[: TITLE_MAX - 1].rstrip() + "…"
    return title


def safe_url(url: str) -> str:
    # Pages link to it: only web addresses, never javascript: or data: URLs.
    url = url.strip()
    return url if url.lower().startswith(("http://", "https://")) else ""


def title_from_text(text: str, *, fallback: str) -> str:
    """The first Markdown heading of `text`, else `fallback` (e.g. the file name)."""
    matches = [m for m in (HEADING.search(text), SETEXT_HEADING.search(text)) if m]
    if matches:
        first = min(matches, key=lambda m: m.start())
        heading = first.group("title").strip()
        if heading:
            return heading
    return fallback


def title_from_filename(name: str) -> str:
    stem = Path(name).stem
    return " ".join(stem.replace("_", " ").replace("-", " ").split()) or stem or "Untitled"


def save_item(
    *,
    owner: User,
    title: str,
    body: str,
    url: str = "",
    source: str = KnowledgeSource.NOTE,
    origin: str = "",
    team: Team | None = None,
    sections: list[Section] | None = None,
) -> Saved:
    """Add an item, or, when `origin` names one this owner already has, update it in place
    (or leave it alone if nothing changed). Its passages are rebuilt whenever it changes."""
    body = clean_text(body)
    title = clean_title(title, body=body)
    url = safe_url(url)
    if not origin:
        with transaction.atomic():
            item = KnowledgeItem.objects.create(
                owner=owner, title=title, body=body, url=url, source=source, team=team
            )
            replace_passages(item, sections)
        return Saved(item, Change.CREATED)
    with transaction.atomic():
        existing = (
            KnowledgeItem.objects.select_for_update()
            .filter(owner=owner, origin=origin)
            .order_by("id")
            .first()
        )
        if existing is None:
            item = KnowledgeItem.objects.create(
                owner=owner,
                title=title,
                body=body,
                url=url,
                source=source,
                origin=origin,
                team=team,
            )
            replace_passages(item, sections)
            return Saved(item, Change.CREATED)
        if (existing.title, existing.body, existing.url, existing.team_id) == (
            title,
            body,
            url,
            team.pk if team else None,
        ):
            return Saved(existing, Change.UNCHANGED)
        existing.title, existing.body, existing.url, existing.source = title, body, url, source
        existing.team = team
        existing.save(update_fields=["title", "body", "url", "source", "team", "updated_at"])
        replace_passages(existing, sections)
        return Saved(existing, Change.UPDATED)


def add_item(
    *,
    owner: User,
    title: str,
    body: str,
    url: str = "",
    source: str = KnowledgeSource.NOTE,
    origin: str = "",
    team: Team | None = None,
    sections: list[Section] | None = None,
) -> KnowledgeItem:
    """Add a knowledge item. With an `origin` ("session:<uuid>", a file path), adding the
    same origin again updates that item instead of making a second one."""
    return save_item(
        owner=owner,
        title=title,
        body=body,
        url=url,
        source=source,
        origin=origin,
        team=team,
        sections=sections,
    ).item


def read_upload(data: bytes, *, name: str) -> tuple[str, str, list[Section]]:
    """(title, body, sections) of an uploaded or imported file; DocumentError when it cannot
    be read. The title is the document's own, else its first heading, else the file name."""
    document: Document = read_document(data, name=name)
    body = clean_text(document.body)
    if not body:
        raise DocumentError(f"“{name}” is empty.", short="empty")
    title = document.title or title_from_text(body, fallback=title_from_filename(name))
    return title, body, document.sections


# --- importing a folder ----------------------------------------------------------------


@dataclass
class ImportSummary:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, why)

    def describe(self) -> str:
        return (
            f"{len(self.created)} new, {len(self.updated)} updated, "
            f"{len(self.unchanged)} unchanged, {len(self.skipped)} skipped"
        )


def text_files(root: Path, skipped: list[tuple[str, str]] | None = None) -> Iterator[Path]:
    """The documents (PDF, HTML, Markdown, text) under `root`, in a stable order, leaving out
    hidden files and folders (.git, .obsidian, editor backups).

    Links are followed only to files inside `root` (a link must not pull in a file from
    elsewhere on the machine); links out of it, dangling links, linked folders and special
    files (pipes, sockets, devices: reading a pipe would hang) are added to `skipped`."""
    root = root.resolve()
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if any(part.startswith(".") for part in relative.parts):
            continue
        reason = _not_importable(root, path)
        if reason:
            if skipped is not None:
                skipped.append((relative.as_posix(), reason))
            continue
        if path.is_file() and path.suffix.lower() in TEXT_SUFFIXES:
            yield path


def _not_importable(root: Path, path: Path) -> str:
    """Why `path` is left out of a folder import, or "" when it is a folder or a file."""
    if path.is_symlink():
        if not path.exists():
            return "a dangling link"
        if path.is_dir():
            return "a linked folder (not followed)"
        if not path.resolve().is_relative_to(root):
            return "a link out of the folder (not followed)"
    if path.exists() and not (path.is_dir() or path.is_file()):
        return "not a regular file"
    return ""


def import_folder(root: Path, *, owner: User) -> ImportSummary:
    """Import every document under `root` for `owner`; a file that cannot be read is skipped
    with the reason, and the rest goes on. A file imported before is matched by
    its absolute path: unchanged files are left alone, changed ones updated in place."""
    root = root.resolve()
    summary = ImportSummary()
    limit = max_file_bytes()
    for path in text_files(root, summary.skipped):
        shown = path.relative_to(root).as_posix()
        try:
            size = path.stat().st_size
            if size > limit:
                summary.skipped.append((shown, f"{size:,} bytes, over the {limit:,}-byte limit"))
                continue
            title, body, sections = read_upload(path.read_bytes(), name=path.name)
        except DocumentError as error:
            summary.skipped.append((shown, error.short))
            continue
        except OSError as error:  # removed or unreadable since the folder was listed
            summary.skipped.append((shown, error.strerror or "could not be read"))
            continue
        saved = save_item(
            owner=owner,
            title=title,
            body=body,
            source=KnowledgeSource.IMPORT,
            origin=f"file:{path}",
            sections=sections,
        )
        getattr(summary, saved.change.value).append(shown)
    return summary
