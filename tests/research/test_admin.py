from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.urls import reverse
from django.utils import timezone

from research.knowledge import add_item
from research.memory import search_memory
from research.models import KnowledgeSource, SearchCache

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client(client: Any, django_user_model: Any) -> Any:
    client.force_login(django_user_model.objects.create_superuser("root", password="pw"))
    return client


def test_knowledge_items_are_searchable_and_filterable(staff_client: Any, alice: Any):
    add_item(owner=alice, title="Tides", body="The moon.")
    add_item(owner=alice, title="Dreams", body="REM.", source=KnowledgeSource.UPLOAD)
    url = reverse("admin:research_knowledgeitem_changelist")

    html = staff_client.get(url, {"q": "moon"}).content.decode()
    assert "Tides" in html and "Dreams" not in html
    html = staff_client.get(url, {"source__exact": "upload"}).content.decode()
    assert "Dreams" in html and "Tides" not in html


def test_an_item_edited_in_the_admin_is_found_by_its_new_words(staff_client: Any, alice: Any):
    item = add_item(owner=alice, title="Volcanoes", body="Magma rises.")
    url = reverse("admin:research_knowledgeitem_change", args=[item.pk])
    form = {"owner": alice.pk, "title": "Glaciers", "body": "Ice flows.", "url": "",
            "source": "note", "origin": "", "passages-TOTAL_FORMS": 1,
            "passages-INITIAL_FORMS": 1, "passages-0-id": item.passages.get().pk,
            "passages-0-item": item.pk}  # fmt: skip
    assert staff_client.post(url, form).status_code == 302
    assert search_memory(owner_ids=[alice.pk], query="volcanoes") == []
    [found] = search_memory(owner_ids=[alice.pk], query="glaciers ice")
    assert (found.item_id, found.passage) == (item.pk, "Ice flows.")


def test_the_search_cache_is_read_only(staff_client: Any):
    now = timezone.now()
    entry = SearchCache.objects.create(
        key="k" * 64, scope="user:1", query="tides", results=[{"url": "https://example.org"}],
        expires_at=now + timedelta(hours=1),
    )  # fmt: skip
    html = staff_client.get(reverse("admin:research_searchcache_changelist")).content.decode()
    assert "tides" in html and "user:1" in html
    assert staff_client.get(reverse("admin:research_searchcache_add")).status_code == 403
    change = staff_client.get(reverse("admin:research_searchcache_change", args=[entry.pk]))
    assert change.status_code == 200 and 'name="query"' not in change.content.decode()
