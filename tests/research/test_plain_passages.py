"""Passages as a reader sees them: no Markdown or HTML markup (the heading kept as the
passage's heading), code blocks and tables whole, a PDF's outline as its headings. Each test
builds its document itself."""

from __future__ import annotations

import io
from typing import Any

import pytest
from pypdf import PdfReader, PdfWriter

from research.documents import passages, read_document
from research.knowledge import add_item, read_upload, store_reading
from research.memory import search_memory
from research.models import KnowledgeSource
from tests.research.pdfs import make_pdf

pytestmark = pytest.mark.django_db

MARKDOWN = """\
Guide to **reef** surveys
=========================

Read the [survey protocol](https://example.org/protocol "Protocol") first, and see
![a diver counting fish](diver.png) for the method.<br/>
<!-- a note to the editor,
over two lines -->
> A *quoted* remark on __bleaching__ and ~~old~~ counts.

## Counting `fish_count()` per *transect*

Keep 2*3*4, snake_case_name, x<y and y>z, AT&T, \\*stars\\* and &amp; as written.

---

[protocol]: https://example.org/protocol
"""


def test_markdown_passages_keep_the_words_not_the_markup():
    document = read_document(MARKDOWN.encode(), name="guide.md")
    parts = passages(document.sections)
    assert document.title == "Guide to reef surveys"
    headings = ["Guide to reef surveys", "Counting fish_count() per transect"]
    assert [p.heading for p in parts] == headings
    assert parts[0].text == (
        "Guide to reef surveys\n\n"
        "Read the survey protocol first, and see\n"
        "a diver counting fish for the method.\n\n"
        "A quoted remark on bleaching and old counts."
    )
    assert parts[1].text == (
        "Counting fish_count() per transect\n\n"
        "Keep 2*3*4, snake_case_name, x<y and y>z, AT&T, *stars* and & as written."
    )


def test_an_html_page_is_stored_without_markup():
    page = (
        b"<html><head><title>Reef notes</title></head><body><article>"
        b"<h1>The <em>reef</em> survey</h1><p>Divers counted <b>fish</b> along a "
        b'<a href="https://example.org">transect</a> and wrote <code>n_fish</code> down. '
        + b"The water was warm and clear all week. " * 4
        + b"</p><h2>Results by <i>site</i></h2><p>"
        + b"Cover fell by half at the northern sites. " * 4
        + b"</p></article></body></html>"
    )
    document = read_document(page, name="reef.html")
    parts = passages(document.sections)
    assert [p.heading for p in parts] == ["The reef survey", "Results by site"]
    assert parts[0].text.startswith("The reef survey\n\nDivers counted fish along a transect ")
    assert "wrote n_fish down" in parts[0].text
    for marks in ("**", "*", "#", "`", "<", "](", "|"):
        assert marks not in document.body, marks


def test_a_notes_passages_are_plain_and_found_by_their_words(alice: Any):
    item = add_item(owner=alice, title="Dives", body="# Night *dives*\n\nSaw a **manta** ray.")
    assert list(item.passages.values_list("heading", "text")) == [
        ("Night dives", "Night dives\n\nSaw a manta ray.")
    ]
    assert item.body == "# Night *dives*\n\nSaw a **manta** ray."  # the note as typed
    assert [r.title for r in search_memory(owner_ids=[alice.pk], query="manta ray")] == ["Dives"]


TABLE = "\n".join(
    ["| Site | Cover | Note |", "|:-----|------:|------|"]
    + [f"| site {n} | {n}% | **quadrat** survey number {n} at dawn |" for n in range(60)]
)


def test_a_table_that_fits_stays_whole_in_one_passage():
    small = "\n".join(TABLE.split("\n")[:8])
    text = "Cover per site, as counted:\n" + small + "\nThe counts were repeated in May."
    parts = passages(read_document(text.encode(), name="t.md").sections)
    rows = [f"| site {n} | {n}% | quadrat survey number {n} at dawn |" for n in range(6)]
    assert [p.text for p in parts] == [
        "Cover per site, as counted:\n\n| Site | Cover | Note |\n"
        + "\n".join(rows)
        + "\n\nThe counts were repeated in May."
    ]


def test_a_long_table_is_cut_between_rows_each_part_under_its_header():
    prose = "A paragraph before the table, long enough to share a passage. " * 3
    parts = passages(read_document(f"{prose}\n\n{TABLE}\n".encode(), name="t.md").sections)
    tables = [p.text for p in parts if "| Site |" in p.text]
    assert len(tables) > 2 and all(len(p.text) <= 1000 for p in parts)
    rows: list[str] = []
    for table in tables:
        lines = table[table.index("| Site |") :].split("\n")
        assert lines[0] == "| Site | Cover | Note |"  # every part names its columns
        rows += lines[1:]
    assert rows == [f"| site {n} | {n}% | quadrat survey number {n} at dawn |" for n in range(60)]


def test_markup_stays_inside_code_blocks():
    text = "Run it:\n\n```python\nx = a**2 * b  # **not** bold\n[a](b)\n```\n\nDone *now*."
    parts = passages(read_document(text.encode(), name="c.md").sections)
    assert parts[0].text == (
        "Run it:\n\n```python\nx = a**2 * b  # **not** bold\n[a](b)\n```\n\nDone now."
    )


def test_a_text_file_keeps_its_characters():
    text = "Notes: *not emphasis* in a text file, and [1] stays.\n"
    assert read_document(text.encode(), name="n.txt").body == text.strip()


def outlined_pdf() -> bytes:
    data = make_pdf(
        [
            "Preface words before any chapter.\n1 Introduction\nWhy reefs matter.\n"
            "1.1 Background\nEarlier surveys.",
            "More background on page two.\n2 Methods\nWe counted fish.",
            "Counts per site, page three.",
        ],
        title="Reef survey",
    )
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    chapter = writer.add_outline_item(title="Introduction", page_number=0)
    writer.add_outline_item(title="Background", page_number=0, parent=chapter)
    writer.add_outline_item(title="Methods", page_number=1)
    writer.add_outline_item(title="Results", page_number=2)  # not a line of the page
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def test_a_pdfs_outline_entries_become_its_headings():
    document = read_document(outlined_pdf(), name="reef.pdf")
    assert [(s.page, s.heading, s.text) for s in document.sections] == [
        (1, "", "Preface words before any chapter."),
        (1, "Introduction", "1 Introduction\nWhy reefs matter."),
        (1, "Background", "1.1 Background\nEarlier surveys."),
        (2, "Background", "More background on page two."),
        (2, "Methods", "2 Methods\nWe counted fish."),
        (3, "Results", "Counts per site, page three."),
    ]
    assert document.title == "Reef survey"


def test_a_damaged_outline_leaves_the_text_readable():
    data = outlined_pdf().replace(b"/Outlines", b"/Outlinez")
    document = read_document(data, name="reef.pdf")
    assert {s.heading for s in document.sections} == {""}
    assert "We counted fish." in document.body


def test_a_passage_is_located_by_its_outline_heading(alice: Any):
    saved = store_reading(
        read_upload(outlined_pdf(), name="reef.pdf"), owner=alice, source=KnowledgeSource.UPLOAD
    )
    passage = saved.item.passages.get(text__contains="We counted fish")
    assert passage.locator == "p. 2 · § Methods"
