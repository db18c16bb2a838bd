from __future__ import annotations

from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from research.knowledge import add_item
from research.models import KnowledgeItem, KnowledgeSource

pytestmark = pytest.mark.django_db

LIST = reverse("knowledge-list")
ADD = reverse("knowledge-add")
UPLOAD = reverse("knowledge-upload")


@pytest.fixture
def alice_client(client: Any, alice: Any) -> Any:
    client.force_login(alice)
    return client


@pytest.fixture
def bob_client(client: Any, bob: Any) -> Any:
    client.force_login(bob)
    return client


@pytest.fixture
def note(alice: Any) -> KnowledgeItem:
    return add_item(owner=alice, title="Why we dream", body="Dreams consolidate memory.")


def upload(client: Any, name: str, data: bytes) -> Any:
    return client.post(UPLOAD, {"file": SimpleUploadedFile(name, data, "text/plain")})


@pytest.mark.parametrize(
    ("method", "name"),
    [("get", "knowledge-list"), ("post", "knowledge-add"), ("post", "knowledge-upload")],
)
def test_pages_require_login(client: Any, method: str, name: str):
    response = getattr(client, method)(reverse(name))
    assert response.status_code == 302 and response.url.startswith(reverse("login"))


@pytest.mark.parametrize("name", ["knowledge-detail", "knowledge-delete"])
def test_item_pages_require_login(client: Any, note: KnowledgeItem, name: str):
    response = client.get(reverse(name, args=[note.pk]))
    assert response.status_code == 302 and reverse("login") in response.url


@pytest.mark.parametrize(
    ("method", "name"),
    [("get", "knowledge-detail"), ("get", "knowledge-delete"), ("post", "knowledge-delete")],
)
def test_another_users_item_is_a_404(bob_client: Any, note: KnowledgeItem, method: str, name: str):
    response = getattr(bob_client, method)(reverse(name, args=[note.pk]))
    assert response.status_code == 404
    assert KnowledgeItem.objects.filter(pk=note.pk).exists()


@pytest.mark.parametrize(
    ("method", "url"), [("get", ADD), ("get", UPLOAD), ("post", LIST), ("put", LIST)]
)
def test_wrong_methods_are_refused(alice_client: Any, method: str, url: str):
    assert getattr(alice_client, method)(url).status_code == 405


def test_an_empty_knowledge_base_says_what_to_do(alice_client: Any):
    html = alice_client.get(LIST).content.decode()
    assert "Your knowledge base is empty" in html


def test_the_list_shows_only_my_items(alice_client: Any, note: KnowledgeItem, bob: Any):
    add_item(owner=bob, title="Bob's secret plan", body="Nobody else may read this.")
    html = alice_client.get(LIST).content.decode()
    assert "Why we dream" in html and "secret plan" not in html


def test_adding_a_note(alice_client: Any, alice: Any):
    response = alice_client.post(
        ADD, {"title": "Tides", "body": "The moon pulls the sea.", "url": "example.org/tides"}
    )
    assert response.status_code == 302 and response.url == LIST
    item = KnowledgeItem.objects.get()
    assert (item.owner, item.title, item.source) == (alice, "Tides", KnowledgeSource.NOTE)
    assert item.url == "https://example.org/tides"


def test_a_note_without_a_body_shows_the_error(alice_client: Any):
    response = alice_client.post(ADD, {"title": "Empty", "body": "   "})
    assert response.status_code == 422
    assert "Write something to remember." in response.content.decode()
    assert not KnowledgeItem.objects.exists()


def test_uploading_markdown_takes_the_title_from_its_heading(alice_client: Any, alice: Any):
    response = upload(alice_client, "dreams.md", "# Why we dream\n\nREM sleep… ✓".encode())
    item = KnowledgeItem.objects.get()
    assert response.status_code == 302 and response.url == item.get_absolute_url()
    assert (item.owner, item.title, item.source) == (alice, "Why we dream", KnowledgeSource.UPLOAD)
    # Stored as a reader sees it: NFKC-normalised (the ellipsis is three dots), without the
    # heading's marker.
    assert item.body == "Why we dream\n\nREM sleep... ✓"


def test_uploading_text_without_a_heading_takes_the_file_name(alice_client: Any):
    upload(alice_client, "sleep_and-memory.txt", b"Plain notes.")
    assert KnowledgeItem.objects.get().title == "sleep and memory"


def test_a_file_that_is_not_utf8_is_refused_with_a_clear_error(alice_client: Any):
    response = upload(alice_client, "latin.md", "Café crème".encode("latin-1"))
    assert response.status_code == 422
    html = response.content.decode()
    assert "“latin.md” is not UTF-8 text" in html and "Save it as UTF-8" in html
    assert not KnowledgeItem.objects.exists()


@pytest.mark.parametrize(
    ("name", "data", "message"),
    [
        ("photo.png", b"\x89PNG", "is not a PDF, HTML, Markdown or text file"),
        ("notes.txt", bytes(range(256)) * 3, "looks like a binary file, not text"),
        ("broken.pdf", b"%PDF-1.4\n1 0 obj garbage", "is a damaged or unreadable PDF"),
        ("empty.md", b"  \n ", "is empty"),
        ("big.txt", b"x" * 2_000, "the limit is 1,000 bytes"),
    ],
)
def test_unsuitable_files_are_refused(
    alice_client: Any, settings: Any, name: str, data: bytes, message: str
):
    settings.DEEPTHINK_KNOWLEDGE_MAX_UPLOAD_BYTES = 1_000
    response = upload(alice_client, name, data)
    assert response.status_code == 422 and message in response.content.decode()
    assert not KnowledgeItem.objects.exists()


def test_search_shows_ranked_results_with_scores(alice_client: Any, alice: Any):
    add_item(owner=alice, title="Sleep stages", body="Dreams happen mostly in REM sleep.")
    add_item(owner=alice, title="Dreams", body="Why do we have them?")
    html = alice_client.get(LIST, {"q": "dreams"}).content.decode()
    assert "Results for “dreams”" in html
    assert html.index(">Dreams</a>") < html.index(">Sleep stages</a>")
    assert html.count('class="score"') == 2 and "relevance 100%" in html


def test_search_results_are_escaped(alice_client: Any, alice: Any):
    add_item(owner=alice, title="<script>alert(1)</script> dreams", body="<b>dreams</b> & more")
    html = alice_client.get(LIST, {"q": "<script> dreams"}).content.decode()
    assert "<script>alert(1)" not in html and "<b>dreams" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt; dreams" in html
    assert "dreams &amp; more" in html  # the passage's text: markup stripped, the rest escaped


def test_search_without_matches_says_so(alice_client: Any, note: KnowledgeItem):
    html = alice_client.get(LIST, {"q": "volcanoes"}).content.decode()
    assert "Nothing in your knowledge matches “volcanoes”" in html


def test_search_never_shows_another_users_items(alice_client: Any, bob: Any):
    add_item(owner=bob, title="Bob's dreams", body="Private dreams.")
    html = alice_client.get(LIST, {"q": "dreams"}).content.decode()
    assert "Bob&#x27;s dreams" not in html and "Nothing in your knowledge matches" in html


def test_an_htmx_search_renders_only_the_results(alice_client: Any, note: KnowledgeItem):
    response = alice_client.get(LIST, {"q": "dream"}, headers={"HX-Request": "true"})
    html = response.content.decode()
    assert html.lstrip().startswith('<div id="search-results"')
    assert "Why we dream" in html and "Add a note" not in html and "<html" not in html


def test_an_item_page_shows_the_body_escaped(alice_client: Any, alice: Any):
    item = add_item(owner=alice, title="Markup", body="<img src=x onerror=alert(1)>\n\nSecond")
    html = alice_client.get(item.get_absolute_url()).content.decode()
    assert "<img src=x" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html


def test_deleting_asks_first_then_deletes(alice_client: Any, note: KnowledgeItem):
    url = reverse("knowledge-delete", args=[note.pk])
    confirm = alice_client.get(url).content.decode()
    assert "Delete “Why we dream”?" in confirm and 'method="post"' in confirm
    assert KnowledgeItem.objects.filter(pk=note.pk).exists()

    response = alice_client.post(url)
    assert response.status_code == 302 and response.url == LIST
    assert not KnowledgeItem.objects.filter(pk=note.pk).exists()
