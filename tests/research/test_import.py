from __future__ import annotations

from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from research.knowledge import title_from_text
from research.models import KnowledgeItem, KnowledgeSource

pytestmark = pytest.mark.django_db


@pytest.fixture
def notes(tmp_path: Path) -> Path:
    (tmp_path / "deep" / "deeper").mkdir(parents=True)
    (tmp_path / ".obsidian").mkdir()
    (tmp_path / "dreams.md").write_text("Intro line\n\n# Why we dream\n\nREM sleep.\n")
    (tmp_path / "deep" / "tides.txt").write_text("The moon pulls the sea.\n")
    (tmp_path / "deep" / "deeper" / "sleep-cycles.md").write_text("No heading here.\n")
    (tmp_path / "deep" / "latin.md").write_bytes("Café".encode("latin-1"))
    (tmp_path / "empty.txt").write_text("   \n")
    (tmp_path / "photo.png").write_bytes(b"\x89PNG")
    (tmp_path / ".obsidian" / "config.md").write_text("# Hidden\n")
    return tmp_path


def import_knowledge(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("import_knowledge", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_imports_text_files_from_nested_folders(notes: Path, alice: Any):
    out, err = import_knowledge(str(notes), "--owner", "alice")

    items = sorted(KnowledgeItem.objects.all(), key=lambda i: i.title.lower())
    assert [i.title for i in items] == ["sleep cycles", "tides", "Why we dream"]
    assert all(i.owner == alice and i.source == KnowledgeSource.IMPORT for i in items)
    assert "3 new, 0 updated, 0 unchanged, 2 skipped" in out
    assert "deep/latin.md (not UTF-8 text)" in err and "empty.txt (empty)" in err


def test_a_second_import_adds_nothing_and_a_changed_file_is_updated(notes: Path, alice: Any):
    import_knowledge(str(notes), "--owner", "alice")
    out, _ = import_knowledge(str(notes), "--owner", "alice")
    assert "0 new, 0 updated, 3 unchanged" in out
    assert KnowledgeItem.objects.count() == 3

    (notes / "deep" / "tides.txt").write_text("# Tides\n\nThe moon and the sun pull the sea.\n")
    out, _ = import_knowledge(str(notes), "--owner", "alice")
    assert "0 new, 1 updated, 2 unchanged" in out
    assert KnowledgeItem.objects.filter(title="Tides").count() == 1
    assert KnowledgeItem.objects.count() == 3


def test_the_same_files_for_another_owner_are_theirs(notes: Path, alice: Any, bob: Any):
    import_knowledge(str(notes), "--owner", "alice")
    import_knowledge(str(notes), "--owner", "bob")
    assert KnowledgeItem.objects.filter(owner=bob).count() == 3


def test_an_unknown_owner_is_an_error(notes: Path):
    with pytest.raises(CommandError, match="There is no user 'nobody'"):
        import_knowledge(str(notes), "--owner", "nobody")


def test_a_missing_folder_is_an_error(tmp_path: Path, alice: Any):
    with pytest.raises(CommandError, match="There is no folder at"):
        import_knowledge(str(tmp_path / "missing"), "--owner", "alice")


def test_a_file_instead_of_a_folder_is_an_error(notes: Path, alice: Any):
    with pytest.raises(CommandError, match="is a file"):
        import_knowledge(str(notes / "dreams.md"), "--owner", "alice")


@pytest.mark.parametrize(
    ("text", "title"),
    [
        ("# Title\n\nBody", "Title"),
        ("  ## Closed heading ##\n", "Closed heading"),
        ("Setext title\n=====\n\nBody", "Setext title"),
        ("#hashtag is not a heading\n", "fallback"),
        ("Just prose.", "fallback"),
        ("```\ncode\n```\n\nSecond\n---\n\n# Later", "Second"),
    ],
)
def test_the_title_is_the_first_markdown_heading(text: str, title: str):
    assert title_from_text(text, fallback="fallback") == title


def test_links_out_of_the_folder_and_special_files_are_skipped(
    notes: Path, alice: Any, tmp_path_factory: Any
):
    import os

    outside = tmp_path_factory.mktemp("outside") / "secret.md"
    outside.write_text("# Secret\n\nNot for the knowledge base.\n")
    (notes / "leak.md").symlink_to(outside)
    (notes / "gone.md").symlink_to(notes / "missing.md")
    (notes / "alias.md").symlink_to(notes / "dreams.md")  # inside the folder: fine
    os.mkfifo(notes / "pipe.md")

    _, err = import_knowledge(str(notes), "--owner", "alice")

    titles = set(KnowledgeItem.objects.values_list("title", flat=True))
    assert "Secret" not in titles and "Why we dream" in titles
    assert "leak.md (a link out of the folder (not followed))" in err
    assert "gone.md (a dangling link)" in err
    assert "pipe.md (not a regular file)" in err
