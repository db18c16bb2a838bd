"""Writing the knowledge base: notes, uploaded and imported documents, session answers.

Everything that adds an item goes through `add_item` (or `save_item`, which also says what
happened), so titles and bodies are cleaned the same way wherever they come from, every
item is split into passages (with their page or heading) that search and citations point to,
and the same text is stored once per owner and team. Files are read by `read_upload`, in a
process of its own with a time and a memory limit (research/read_process.py).
"""

from __future__ import annotations

import enum
import hashlib
import logging
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import User
from django.db import DataError, connection, transaction

from accounts.models import Team

from . import documents, read_process
from .documents import DocumentError, Section, clean_text, first_heading
from .models import KnowledgeItem, KnowledgeSource, Passage

# Every format a document may come in (research/documents.py), so the folder walk, the
# upload form and the API accept the same files.
TEXT_SUFFIXES = documents.SUFFIXES
TITLE_MAX = KnowledgeItem._meta.get_field("title").max_length or 300

logger = logging.getLogger(__name__)


class Change(enum.StrEnum):
    CREATED = "created"
    UPDATED = "updated"
    UNCHANGED = "unchanged"
    # The same text is already stored for this owner and team: nothing new was added, and
    # Saved.item is the item that holds it.
    DUPLICATE = "duplicate"


@dataclass(frozen=True)
class Saved:
    item: KnowledgeItem
    change: Change


@dataclass(frozen=True)
class Reading:
    """A file as read for the knowledge base."""

    name: str
    title: str
    body: str
    sections: list[Section]
    notes: list[str]  # how it was read, for a person (a cut at the passage limit, warnings)


def max_upload_bytes() -> int:
    """The largest file the upload form and the API take."""
    return int(getattr(settings, "DEEPTHINK_KNOWLEDGE_MAX_UPLOAD_BYTES", 20_000_000))


def max_file_bytes() -> int:
    """The largest file `import_knowledge` reads; bigger ones are skipped with a message."""
    return int(getattr(settings, "DEEPTHINK_KNOWLEDGE_MAX_FILE_BYTES", 50_000_000))


def read_seconds() -> float:
    """How long one file may take to read before it is refused."""
    return float(settings.DEEPTHINK_KNOWLEDGE_READ_SECONDS)


def read_memory_bytes() -> int:
    """How much memory reading one file may take before it is refused."""
    return int(settings.DEEPTHINK_KNOWLEDGE_READ_MEMORY_MB) * 1_000_000


_readers_lock = threading.Lock()
_readers: tuple[int, threading.BoundedSemaphore] | None = None


def _reader_slots() -> threading.BoundedSemaphore:
    """At most DEEPTHINK_KNOWLEDGE_READERS files are read at once in this process; more
    uploads wait their turn (each reader may take its memory limit)."""
    global _readers
    wanted = int(settings.DEEPTHINK_KNOWLEDGE_READERS)
    with _readers_lock:
        if _readers is None or _readers[0] != wanted:
            _readers = (wanted, threading.BoundedSemaphore(wanted))
        return _readers[1]


def content_digest(body: str) -> str:
    """What two items with the same text share: a hash of the cleaned body with its
    whitespace collapsed (so the same document read twice, or re-wrapped, compares equal)."""
    return hashlib.sha256(" ".join(body.split()).encode()).hexdigest()


def replace_passages(item: KnowledgeItem, sections: list[Section] | None = None) -> list[str]:
    """Split `item` into passages (from `sections` when the document gave them, else from its
    Markdown headings) and store them in place of the old ones. Returns the note to keep when
    it is over the passage limit (documents.MAX_PASSAGES), else []."""
    parts = documents.passages(
        sections or documents.markdown_sections(item.body), limit=documents.MAX_PASSAGES + 1
    )
    notes = []
    if len(parts) > documents.MAX_PASSAGES:
        parts = parts[: documents.MAX_PASSAGES]
        notes.append(documents.truncation_note(len(parts), parts[-1]))
    if not parts:  # an item with a title and no text is still found by its title
        parts = [Section("")]
    Passage.objects.filter(item=item).delete()
    Passage.objects.bulk_create(
        (
            Passage(
                item=item,
                title=item.title,
                position=index,
                heading=clean_title(part.heading)[:300] if part.heading else "",
                page=part.page,
                text=clean_text(part.text),
            )
            for index, part in enumerate(parts)
        ),
        batch_size=500,
    )
    return notes


def clean_title(title: str, *, body: str = "") -> str:
    title = " ".join(clean_text(title[: TITLE_MAX * 4]).split())
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
    return first_heading(text) or fallback


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
    notes: Sequence[str] = (),
) -> Saved:
    """Add an item, or, when `origin` names one this owner already has, update it in place
    (or leave it alone if nothing changed). Its passages are rebuilt whenever it changes.

    A new upload or imported file whose text (cleaned, whitespace aside) this owner already
    has, shared with the same team or private alike, is not stored again: the answer is
    Change.DUPLICATE with the item that has it. Notes and session answers are always stored
    (a note's title is part of what it says; each session keeps its own answer)."""
    body = clean_text(body)
    title = clean_title(title, body=body)
    url = safe_url(url)
    digest = content_digest(body)
    notes = list(notes)
    with transaction.atomic():
        existing = None
        if origin:
            existing = (
                KnowledgeItem.objects.select_for_update()
                .filter(owner=owner, origin=origin)
                .order_by("id")
                .first()
            )
        if existing is None:
            if source in (KnowledgeSource.UPLOAD, KnowledgeSource.IMPORT):
                twin = (
                    KnowledgeItem.objects.filter(owner=owner, team=team, digest=digest)
                    .order_by("id")
                    .first()
                )
                if twin is not None:
                    return Saved(twin, Change.DUPLICATE)
            item = KnowledgeItem.objects.create(
                owner=owner,
                title=title,
                body=body,
                url=url,
                source=source,
                origin=origin,
                team=team,
                digest=digest,
                notes=notes,
            )
            if cut := replace_passages(item, sections):
                item.notes = [*notes, *cut]
                item.save(update_fields=["notes"])
            return Saved(item, Change.CREATED)
        if (existing.title, existing.body, existing.url, existing.team_id, existing.notes) == (
            title,
            body,
            url,
            team.pk if team else None,
            notes,
        ):
            return Saved(existing, Change.UNCHANGED)
        existing.title, existing.body, existing.url, existing.source = title, body, url, source
        existing.team, existing.digest = team, digest
        existing.notes = notes + replace_passages(existing, sections)
        existing.save(
            update_fields=[
                "title",
                "body",
                "url",
                "source",
                "team",
                "digest",
                "notes",
                "updated_at",
            ]
        )
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
    same origin again updates that item instead of making a second one; a file's text that
    is already there gives the item that has it."""
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


def read_upload(data: bytes, *, name: str) -> Reading:
    """An uploaded or imported file, read in a process of its own within the time and memory
    limits (DEEPTHINK_KNOWLEDGE_READ_SECONDS, _READ_MEMORY_MB); DocumentError, with the
    reason, when it cannot be read. The title is the document's own, else its first heading,
    else the file name."""
    if not connection.in_atomic_block:
        # The request's database connection goes back to the pool while the file is read
        # (up to a minute): uploads waiting on readers must not hold the connections that
        # every other request needs. The next query takes one again.
        connection.close()
    slots = _reader_slots()
    if not slots.acquire(timeout=2 * read_seconds()):
        raise DocumentError(
            f"“{name}” could not be read now: the server is busy reading other files; try "
            "again in a minute.",
            short="the server is busy reading other files",
        )
    try:
        document = read_process.read(
            data, name=name, seconds=read_seconds(), memory_bytes=read_memory_bytes()
        )
    finally:
        slots.release()
    return Reading(name, document.title, document.body, document.sections, document.notes)


def store_reading(
    reading: Reading,
    *,
    owner: User,
    source: str,
    team: Team | None = None,
    origin: str = "",
) -> Saved:
    """`save_item` for a file that was read; DocumentError if the database refuses its text
    (nothing of it is stored then)."""
    try:
        return save_item(
            owner=owner,
            title=reading.title,
            body=reading.body,
            source=source,
            origin=origin,
            team=team,
            sections=reading.sections,
            notes=reading.notes,
        )
    except DataError as error:
        logger.warning("The database refused %s: %s", reading.name, error)
        raise DocumentError(
            f"“{reading.name}” could not be stored: the database refused its text.",
            short="refused by the database",
        ) from None


# --- importing a folder ----------------------------------------------------------------


@dataclass
class ImportSummary:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, why)
    duplicate: list[tuple[str, str]] = field(default_factory=list)  # (path, the item's title)
    notes: dict[str, list[str]] = field(default_factory=dict)  # path -> how it was read

    def describe(self) -> str:
        return (
            f"{len(self.created)} new, {len(self.updated)} updated, "
            f"{len(self.unchanged)} unchanged, {len(self.skipped)} skipped, "
            f"{len(self.duplicate)} already imported"
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
            reading = read_upload(path.read_bytes(), name=path.name)
            saved = store_reading(
                reading, owner=owner, source=KnowledgeSource.IMPORT, origin=f"file:{path}"
            )
        except DocumentError as error:
            summary.skipped.append((shown, error.short))
            continue
        except OSError as error:  # removed or unreadable since the folder was listed
            summary.skipped.append((shown, error.strerror or "could not be read"))
            continue
        if saved.change is Change.DUPLICATE:
            summary.duplicate.append((shown, saved.item.title))
            continue
        getattr(summary, saved.change.value).append(shown)
        if saved.item.notes and saved.change is not Change.UNCHANGED:
            summary.notes[shown] = list(saved.item.notes)
    return summary
