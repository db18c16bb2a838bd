from __future__ import annotations

from typing import Any

import pytest
from django.db import connection, transaction

from research.knowledge import add_item
from research.memory import (
    MemoryResult,
    asearch_memory,
    fts5_query,
    query_terms,
    search_memory,
)
from research.models import KnowledgeItem, KnowledgeSource

pytestmark = pytest.mark.django_db

HOSTILE_QUERIES = [
    '"',
    '""photosynthesis',
    "AND OR NOT",
    "*",
    "photo*",
    "NEAR(",
    "NEAR(photosynthesis light, 2)",
    "title: photosynthesis",
    "{title body}: light",
    "^light",
    "(light OR",
    "-photosynthesis",
    "'; DROP TABLE research_knowledgeitem; --",
    "' OR 1=1 --",
    "%s %% %(name)s",
    "\x00light\x00",
    "🧠💭🌙",
    "light 🌙 dreams",
    "x" * 10_000,
    "light " * 2_000,
    "²³ ½",
    "   ",
    "",
]


def search(owner: Any, query: str, **kwargs: Any) -> list[MemoryResult]:
    return search_memory(owner_ids=[owner.pk], query=query, **kwargs)


class MemorySearchContract:
    """The behaviour callers rely on, whatever the database."""

    def test_a_title_match_ranks_above_a_single_mention_in_a_body(self, alice: Any):
        in_body = add_item(
            owner=alice,
            title="Plant biology",
            body="Many things happen in a leaf. Photosynthesis is one of them, among many "
            "other processes that keep the cells alive.",
        )
        in_title = add_item(
            owner=alice, title="Photosynthesis", body="How plants turn light into sugar."
        )
        results = search(alice, "photosynthesis")
        assert [r.item_id for r in results] == [in_title.pk, in_body.pk]
        assert results[0].score > results[1].score > 0

    def test_word_forms_match_through_stemming(self, alice: Any):
        item = add_item(owner=alice, title="Night notes", body="She kept dreaming about the sea.")
        assert [r.item_id for r in search(alice, "dreams")] == [item.pk]

    def test_items_matching_more_of_the_words_rank_higher(self, alice: Any):
        one = add_item(owner=alice, title="Tides", body="The moon moves water.")
        both = add_item(owner=alice, title="Tides and the moon", body="The moon moves tides.")
        add_item(owner=alice, title="Cooking", body="Boil water for pasta.")
        results = search(alice, "moon tides")
        assert [r.item_id for r in results][:2] == [both.pk, one.pk]
        assert len(results) == 2

    def test_a_result_carries_an_excerpt_around_the_match_and_the_item_fields(self, alice: Any):
        filler = "Nothing to see in this sentence at all. " * 40
        item = add_item(
            owner=alice,
            title="Long read",
            body=f"{filler}Mitochondria produce most of the cell's energy. {filler}",
            url="https://example.org/cells",
            source=KnowledgeSource.UPLOAD,
        )
        [result] = search(alice, "mitochondria")
        assert result.item_id == item.pk and result.title == "Long read"
        assert result.url == "https://example.org/cells" and result.source == "upload"
        assert "Mitochondria produce" in result.snippet
        assert len(result.snippet) <= 300 < len(item.body)
        assert isinstance(result.score, float)

    def test_excerpts_show_the_text_a_reader_sees(self, alice: Any):
        # Passages are plain text (markup stripped); a "<" that is not a tag stays as written.
        body = "Use <b>bold</b> & <em>dreams</em> sparingly, when x<y and y>z."
        add_item(owner=alice, title="Markup", body=body)
        [result] = search(alice, "dreams")
        assert result.snippet == "Use bold & dreams sparingly, when x<y and y>z."

    @pytest.mark.parametrize("query", HOSTILE_QUERIES, ids=lambda q: repr(q[:20]))
    def test_hostile_queries_never_raise(self, alice: Any, query: str):
        add_item(owner=alice, title="Photosynthesis", body="Light and dreams.")
        results = search(alice, query)
        assert isinstance(results, list)
        assert all(r.score > 0 for r in results)
        assert KnowledgeItem.objects.count() == 1, "the table is still there"

    def test_words_inside_hostile_text_still_match(self, alice: Any):
        item = add_item(owner=alice, title="Photosynthesis", body="Light.")
        assert [r.item_id for r in search(alice, 'NEAR("photosynthesis" *')] == [item.pk]
        assert [r.item_id for r in search(alice, "'; DROP TABLE light; --")] == [item.pk]

    def test_queries_without_words_return_nothing(self, alice: Any):
        add_item(owner=alice, title="Anything", body="At all.")
        for query in ("", "   ", "*", '"', "🧠", "AND OR NOT"):
            assert search(alice, query) == []

    def test_another_users_items_never_appear(self, alice: Any, bob: Any):
        mine = add_item(owner=alice, title="Coral reefs", body="Reefs bleach in warm water.")
        # Not word for word the same: the same text twice is one result (a copy).
        theirs = add_item(owner=bob, title="Coral reefs", body="Reefs bleach when seas warm.")
        assert [r.item_id for r in search(alice, "coral reefs")] == [mine.pk]
        assert [r.item_id for r in search(bob, "coral reefs")] == [theirs.pk]
        both = search_memory(owner_ids=[alice.pk, bob.pk], query="coral")
        assert {r.item_id for r in both} == {mine.pk, theirs.pk}
        assert search_memory(owner_ids=[], query="coral") == []

    def test_edits_and_deletions_are_searchable_at_once(self, alice: Any):
        # An edit as the app makes one: the same origin saved again (a re-import).
        item = add_item(owner=alice, title="Volcanoes", body="Magma rises.", origin="file:/a")
        assert add_item(owner=alice, title="Glaciers", body="Ice flows.", origin="file:/a") == item
        assert search(alice, "volcanoes") == []
        assert [r.item_id for r in search(alice, "glaciers")] == [item.pk]
        item.delete()
        assert search(alice, "glaciers") == []

    def test_the_limit_is_respected(self, alice: Any):
        for n in range(5):
            add_item(owner=alice, title=f"Comet {n}", body=f"Comet {n} has a tail.")
        assert len(search(alice, "comet", limit=3)) == 3
        assert search(alice, "comet", limit=0) == []

    def test_a_rare_words_only_page_ranks_first_ahead_of_copies_of_a_long_document(
        self, alice: Any
    ):
        paper = "\n\n".join(
            f"Coral reefs warm every summer, and reef temperature rises in the shallow "
            f"reef flats of site {n}. Coral cover and temperature were logged daily."
            for n in range(60)
        )
        for copy in range(13):
            add_item(owner=alice, title=f"Reef temperature survey {copy}", body=paper)
        page = add_item(
            owner=alice,
            title="Field note",
            body="Zooxanthellae left the coral after the storm.",
        )
        results = search(alice, "zooxanthellae coral reef temperature", limit=5)
        assert results[0].item_id == page.pk

    def test_passages_with_only_common_words_still_fill_the_results(self, alice: Any):
        page = add_item(owner=alice, title="Field note", body="Zooxanthellae on the coral reef.")
        notes = {
            add_item(owner=alice, title=f"Dive {n}", body=f"Coral and reef fish at site {n}.").pk
            for n in range(20)
        }
        results = search(alice, "zooxanthellae coral reef", limit=5)
        assert results[0].item_id == page.pk
        assert len(results) == 5
        assert {r.item_id for r in results[1:]} <= notes

    def test_one_long_document_cannot_fill_the_top_five(self, alice: Any):
        long = add_item(
            owner=alice,
            title="Tidal atlas",
            body="\n\n".join(f"Tides at harbour {n} rise with the moon." for n in range(80)),
        )
        others = {
            add_item(owner=alice, title=f"Note {n}", body=f"The moon, seen from pier {n}.").pk
            for n in range(4)
        }
        results = search(alice, "tides moon", limit=5)
        assert len(results) == 5
        assert sum(r.item_id == long.pk for r in results) <= 2
        assert len(others & {r.item_id for r in results}) == 3

    def test_copies_of_one_text_are_shown_once(self, alice: Any):
        for _ in range(6):
            add_item(owner=alice, title="Meeting notes", body="The lagoon survey starts Monday.")
        other = add_item(owner=alice, title="Plan", body="Survey the lagoon's west side first.")
        results = search(alice, "lagoon survey", limit=5)
        assert [r.passage for r in results].count("The lagoon survey starts Monday.") == 1
        assert other.pk in {r.item_id for r in results}

    def test_the_passage_shown_is_the_one_with_the_query_sentence(self, alice: Any):
        chatter = " ".join(["The water was warm and the water was calm near the water."] * 6)
        body = (
            f"# Setting\n\n{chatter}\n\n# Findings\n\n"
            "Bleaching began when the water reached thirty degrees. Recovery took a year.\n\n"
            f"# Discussion\n\n{chatter}"
        )
        item = add_item(owner=alice, title="Reef report", body=body)
        [best, *_] = search(alice, "Bleaching began when the water reached thirty degrees.")
        assert best.item_id == item.pk
        assert "Bleaching began when the water reached thirty degrees." in best.passage
        assert best.locator == "§ Findings"

    def test_an_item_without_text_is_found_by_its_title(self, alice: Any):
        item = add_item(owner=alice, title="Nautilus", body="")
        assert [r.item_id for r in search(alice, "nautilus")] == [item.pk]


class TestMemorySearch(MemorySearchContract):
    """On the database of this run: SQLite FTS5 by default."""


@pytest.mark.services
class TestMemorySearchOnPostgreSQL(MemorySearchContract):
    @pytest.fixture(autouse=True)
    def _needs_postgresql(self) -> None:
        if connection.vendor != "postgresql":
            pytest.skip(
                f"needs PostgreSQL (this run uses {connection.vendor}); run with "
                "DATABASE_URL=postgres://postgres@127.0.0.1:5432/test pytest -m services"
            )

    def test_the_rare_word_still_wins_once_the_statistics_are_gathered(self, alice: Any):
        # Word frequencies come from ANALYZE's statistics once there are some (autovacuum
        # gathers them), from counts before.
        self.test_a_rare_words_only_page_ranks_first_ahead_of_copies_of_a_long_document(alice)
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE research_passage")
        results = search(alice, "zooxanthellae coral reef temperature", limit=5)
        assert results[0].title == "Field note"

    def test_each_passage_has_a_stored_indexed_search_vector(self, alice: Any):
        add_item(owner=alice, title="Kelp", body="Kelp forests grow fast.")
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT is_generated FROM information_schema.columns "
                "WHERE table_name = 'research_passage' AND column_name = 'search'"
            )
            assert cursor.fetchone() == ("ALWAYS",)
            # Kept in the row (migration 0008), not fetched from TOAST at each read.
            cursor.execute(
                "SELECT attstorage FROM pg_attribute "
                "WHERE attrelid = 'research_passage'::regclass AND attname = 'search'"
            )
            assert cursor.fetchone() == ("m",)
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute(
                "EXPLAIN SELECT id FROM research_passage "
                "WHERE search @@ websearch_to_tsquery('english', 'kelp')"
            )
            plan = "\n".join(row[0] for row in cursor.fetchall())
        assert "research_passage_search_gin" in plan


@pytest.mark.services
def test_a_search_leaves_the_callers_transaction_settings_alone(alice: Any):
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL: run with DATABASE_URL=... pytest -m services")
    add_item(owner=alice, title="Kelp", body="Kelp forests grow fast.")
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('random_page_cost')")
        before = cursor.fetchone()
        assert [r.title for r in search(alice, "kelp forests")] == ["Kelp"]
        cursor.execute("SELECT current_setting('random_page_cost')")
        assert cursor.fetchone() == before


def test_query_terms_keep_only_words():
    assert query_terms('NEAR("Photo" * AND light) -dark ^x') == ["photo", "light", "dark", "x"]
    assert query_terms("a_b C-d") == ["a", "b", "c", "d"]
    assert len(query_terms(" ".join(f"w{n}" for n in range(100)))) == 32
    assert query_terms("x" * 10_000) == ["x" * 64]


def test_fts5_query_quotes_every_term():
    assert fts5_query(["photo", "light"]) == '"photo" OR "light"'


@pytest.mark.django_db(transaction=True)
async def test_async_code_can_search_too(alice: Any):
    from asgiref.sync import sync_to_async
    from django.db import connections

    try:
        item = await sync_to_async(add_item)(owner=alice, title="Auroras", body="Solar wind.")
        results = await asearch_memory(owner_ids=[alice.pk], query="aurora")
        assert [r.item_id for r in results] == [item.pk]
    finally:
        # So PostgreSQL can drop the test database afterwards.
        await sync_to_async(connections.close_all)()
