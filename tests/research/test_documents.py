"""Documents people have (PDF, HTML, Markdown, text) through the upload form, import_knowledge
and the API, split into passages that search and citations point to."""

from __future__ import annotations

from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounts.models import Team
from accounts.tokens import create_token
from research.documents import DocumentError, passages, read_document
from research.knowledge import add_item, read_upload
from research.memory import search_memory
from research.models import KnowledgeItem, Passage
from tests.helpers import WORKER, claim
from tests.research.pdfs import make_pdf

pytestmark = pytest.mark.django_db

ARTICLE = """<!doctype html><html><head><title>Heat pumps explained</title>
<style>.nav { color: red }</style><script>track("visitor-secret")</script></head>
<body><nav><a href="/">Home</a> | <a href="/shop">Shop our deals</a></nav>
<article><h1>Heat pumps explained</h1>
<p>A heat pump moves heat instead of making it, so it delivers three units of heat for each
unit of electricity in mild weather. This coefficient of performance falls as it gets colder
outside, but modern units still manage about two at minus ten degrees.</p>
<h2>Installation</h2>
<p>Installers size the pump from the heat loss of the house, measured room by room, and the
radiators may need to be larger because the water runs cooler than with a gas boiler.</p>
</article><footer>Copyright Example Heating Ltd. Subscribe to the newsletter.</footer>
</body></html>"""


def test_a_pdf_is_read_page_by_page_with_its_title():
    data = make_pdf(["Solar panels lose 0.5% a year.", "Batteries last ten years."], title="Solar")
    document = read_document(data, name="report.pdf")
    assert document.title == "Solar" and document.format == "pdf"
    assert [(s.page, s.text) for s in document.sections] == [
        (1, "Solar panels lose 0.5% a year."),
        (2, "Batteries last ten years."),
    ]


def test_html_keeps_the_main_content_only():
    document = read_document(ARTICLE.encode(), name="heat.html")
    body = document.body
    assert document.title == "Heat pumps explained"
    assert "three units of heat" in body and "room by room" in body
    for noise in ("visitor-secret", "color: red", "Shop our deals", "newsletter"):
        assert noise not in body
    assert [s.heading for s in document.sections][-1] == "Installation"


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("locked.pdf", make_pdf(["Secret plans."], password="hunter2"), "is password-protected"),
        ("broken.pdf", b"%PDF-1.7\n1 0 obj << /Type /Catalog", "damaged or unreadable PDF"),
        ("fake.pdf", b"just text with a pdf name", "is not a PDF"),
        ("scan.pdf", make_pdf([""]), "no text layer"),
        ("blob.md", bytes(range(256)) * 8, "looks like a binary file"),
        ("empty.html", b"<html><body><script>x()</script></body></html>", "no main text"),
    ],
)
def test_bad_documents_are_refused_with_a_reason(name: str, data: bytes, message: str):
    with pytest.raises(DocumentError) as caught:
        read_document(data, name=name)
    assert f"“{name}”" in str(caught.value) and message in str(caught.value)


def test_an_empty_password_pdf_is_read():
    # Many PDFs are "encrypted" with no password only to restrict printing.
    data = make_pdf(["Readable despite encryption."], password="")
    assert read_document(data, name="open.pdf").body == "Readable despite encryption."


def test_long_sections_are_cut_into_bounded_passages_that_keep_their_place():
    paragraph = "Sentence about tides and the moon. " * 20
    sections = read_document(
        f"# Tides\n\n{paragraph}\n\n{paragraph}\n\n# Storms\n\nShort.".encode(), name="sea.md"
    ).sections
    parts = passages(sections, size=400)
    assert all(len(p.text) <= 400 for p in parts) and len(parts) > 3
    assert {p.heading for p in parts} == {"Tides", "Storms"}
    assert "".join(p.text for p in parts).replace("\n", "").replace(" ", "") == "".join(
        s.text for s in sections
    ).replace("\n", "").replace(" ", "")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "papers").mkdir()
    pages = ["Introduction to coral reefs.", "Bleaching starts above 30 degrees Celsius."]
    (tmp_path / "papers" / "reefs.pdf").write_bytes(make_pdf(pages, title="Coral reefs"))
    (tmp_path / "papers" / "locked.pdf").write_bytes(make_pdf(["x"], password="pw"))
    (tmp_path / "papers" / "broken.pdf").write_bytes(b"%PDF-1.4\ntruncated")
    (tmp_path / "heat.html").write_text(ARTICLE)
    (tmp_path / "notes.md").write_text("# Field notes\n\nThe reef was pale in March.\n")
    (tmp_path / "plain.txt").write_text("Water temperature logged hourly.\n")
    (tmp_path / "binary.txt").write_bytes(bytes(range(256)) * 16)
    # 200 MB, sparse: refused by size without being read.
    with (tmp_path / "huge.txt").open("wb") as handle:
        handle.truncate(200 * 1024 * 1024)
    return tmp_path


def test_a_folder_of_documents_imports_with_a_message_per_bad_file(folder: Path, alice: Any):
    out, err = StringIO(), StringIO()
    call_command("import_knowledge", str(folder), "--owner", "alice", stdout=out, stderr=err)

    titles = set(KnowledgeItem.objects.values_list("title", flat=True))
    assert titles == {"Coral reefs", "Heat pumps explained", "Field notes", "plain"}
    assert "4 new, 0 updated, 0 unchanged, 4 skipped" in out.getvalue()
    errors = err.getvalue()
    assert "papers/locked.pdf (password-protected PDF)" in errors
    assert "papers/broken.pdf (damaged or unreadable PDF)" in errors
    assert "binary.txt (binary, not text)" in errors
    assert "huge.txt (209,715,200 bytes, over the 50,000,000-byte limit)" in errors
    reefs = KnowledgeItem.objects.get(title="Coral reefs")
    assert [(p.page, p.text) for p in reefs.passages.all()] == [
        (1, "Introduction to coral reefs."),
        (2, "Bleaching starts above 30 degrees Celsius."),
    ]


def test_the_per_file_limit_is_a_setting(folder: Path, alice: Any, settings: Any):
    settings.DEEPTHINK_KNOWLEDGE_MAX_FILE_BYTES = 40
    err = StringIO()
    call_command("import_knowledge", str(folder), "--owner", "alice", stdout=StringIO(), stderr=err)
    size = (folder / "notes.md").stat().st_size
    assert f"notes.md ({size} bytes, over the 40-byte limit)" in err.getvalue()
    assert "plain" in set(KnowledgeItem.objects.values_list("title", flat=True))


def test_search_points_to_the_passage_that_matches(alice: Any, client: Client):
    client.force_login(alice)
    pdf = make_pdf(["Overview of reef ecology.", "Bleaching begins above thirty degrees."])
    upload = SimpleUploadedFile("reefs.pdf", pdf, "application/pdf")
    response = client.post(reverse("knowledge-upload"), {"file": upload})
    assert response.status_code == 302

    [result] = search_memory(owner_ids=[alice.pk], query="bleaching")
    assert result.passage == "Bleaching begins above thirty degrees."
    assert result.locator == "p. 2"
    assert Passage.objects.get(pk=result.passage_id).page == 2
    html = client.get(reverse("knowledge-list"), {"q": "bleaching"}).content.decode()
    assert '<span class="locator" title="The passage that matches best">p. 2</span>' in html


def test_changing_an_item_rebuilds_its_passages(alice: Any, tmp_path: Path):
    (tmp_path / "a.md").write_text("# One\n\nFirst.\n")
    call_command("import_knowledge", str(tmp_path), "--owner", "alice", stdout=StringIO())
    (tmp_path / "a.md").write_text("# One\n\nFirst.\n\n# Two\n\nSecond.\n")
    call_command("import_knowledge", str(tmp_path), "--owner", "alice", stdout=StringIO())
    item = KnowledgeItem.objects.get()
    assert [p.heading for p in item.passages.all()] == ["One", "Two"]


# --- the API --------------------------------------------------------------------------------


def api_client(user: Any) -> Client:
    return Client(headers={"Authorization": f"Bearer {create_token(user, 'script')[1]}"})


def test_the_api_takes_a_pdf_and_returns_its_passages(alice: Any):
    pdf = make_pdf(["Page one text.", "Page two text."], title="Two pages")
    response = api_client(alice).post(
        "/api/knowledge", {"file": SimpleUploadedFile("two.pdf", pdf, "application/pdf")}
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["title"] == "Two pages"
    assert [(p["page"], p["text"]) for p in body["passages"]] == [
        (1, "Page one text."),
        (2, "Page two text."),
    ]
    assert KnowledgeItem.objects.get().owner == alice


def test_the_api_refuses_a_bad_file_with_the_same_sentence(alice: Any):
    data = make_pdf(["x"], password="pw")
    response = api_client(alice).post(
        "/api/knowledge", {"file": SimpleUploadedFile("locked.pdf", data, "application/pdf")}
    )
    assert response.status_code == 422
    [problem] = response.json()["detail"]
    assert problem["loc"] == ["body", "file"] and "is password-protected" in problem["msg"]
    assert not KnowledgeItem.objects.exists()


def test_the_api_shares_only_with_the_callers_own_teams(alice: Any, bob: Any):
    theirs = Team.objects.create(name="Bob's team")
    theirs.memberships.create(user=bob, role="owner", accepted_at=timezone.now())
    upload = SimpleUploadedFile("n.md", b"# Note\n\nText.", "text/markdown")
    response = api_client(alice).post("/api/knowledge", {"file": upload, "team": theirs.pk})
    assert response.status_code == 422 and not KnowledgeItem.objects.exists()

    ours = Team.objects.create(name="Alice's team")
    ours.memberships.create(user=alice, role="member", accepted_at=timezone.now())
    upload = SimpleUploadedFile("n.md", b"# Note\n\nText.", "text/markdown")
    response = api_client(alice).post("/api/knowledge", {"file": upload, "team": ours.pk})
    assert response.status_code == 201 and KnowledgeItem.objects.get().team == ours


def test_the_api_needs_credentials():
    upload = SimpleUploadedFile("n.md", b"# Note", "text/markdown")
    assert Client().post("/api/knowledge", {"file": upload}).status_code == 401


# --- sessions cite passages, and keep what the model was shown --------------------------------


@pytest.mark.django_db(transaction=True)
async def test_a_session_cites_the_passage_of_a_document_with_its_page(
    alice: Any, make_session: Any
):
    from asgiref.sync import sync_to_async

    from thinking.deliberation import evidence

    pdf = make_pdf(["Overview of reef ecology.", "Bleaching begins above thirty degrees."])
    reading = await sync_to_async(read_upload)(pdf, name="reefs.pdf")
    await sync_to_async(add_item)(
        owner=alice, title="Reef report", body=reading.body, sections=reading.sections
    )
    session = await sync_to_async(make_session)()
    await claim(session)

    async def nothing(sources: list) -> None:
        pass

    research = await sync_to_async(evidence.Research.for_session)(session)
    [source] = await evidence.gather(
        session_id=session.pk, research=research, web_queries=[],
        memory_queries=["bleaching degrees"], on_sources=nothing, worker_id=WORKER,
    )  # fmt: skip
    assert source.title == "Reef report (p. 2)"
    assert source.snippet == "Bleaching begins above thirty degrees."
    assert source.key.startswith("passage:")
    # What the model reads is exactly what is stored (and what the citation check reads).
    pack = evidence.evidence_pack([source])
    assert "Bleaching begins above thirty degrees." in pack and 'title="Reef report (p. 2)"' in pack


@pytest.mark.django_db(transaction=True)
async def test_a_web_source_keeps_the_page_text_the_model_was_shown(
    fake_exa: Any, make_session: Any
):
    from asgiref.sync import sync_to_async

    from thinking.deliberation import evidence

    session = await sync_to_async(make_session)()
    await claim(session)

    async def nothing(sources: list) -> None:
        pass

    research = await sync_to_async(evidence.Research.for_session)(session)
    try:
        sources = await evidence.gather(
            session_id=session.pk, research=research, web_queries=["reef bleaching"],
            memory_queries=[], on_sources=nothing, worker_id=WORKER,
        )  # fmt: skip
    finally:
        await research.close()
    first = min(sources, key=lambda s: s.number)
    # The highlight, then the page's own text (asked of Exa, bounded), not only the summary.
    assert first.snippet.startswith("Source 1 explains reef bleaching with evidence")
    assert "Source 1 reports measurements on reef bleaching" in first.snippet
    assert len(first.snippet) <= 1200
    assert first.snippet in evidence.evidence_pack([first])
