from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from channels.db import database_sync_to_async
from django.db import connections
from django.utils import timezone

from fakes.exa_server import FakeExa
from research.models import SearchCache
from research.web import NOT_CONFIGURED, ResearchError, WebResult, WebSearch, normalise_url
from tests.helpers import cache_reads

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
async def _close_connections() -> AsyncIterator[None]:
    # The cache is read and written from asgiref's worker thread; close its connections so
    # the test database can be dropped afterwards (PostgreSQL refuses while they are open).
    yield
    await database_sync_to_async(connections.close_all)()


async def web_search(query: str, *, num_results: int = 5, scope: str = "user:1") -> list[WebResult]:
    async with WebSearch.from_settings() as web:
        return await web.search(query, num_results=num_results, scope=scope)


async def search_error(query: str = "Why do we dream?") -> ResearchError:
    with pytest.raises(ResearchError) as caught:
        await web_search(query)
    return caught.value


def page(url: str, title: str = "A page", score: float | None = 0.5) -> dict[str, Any]:
    return {"id": url, "url": url, "title": title, "score": score, "highlights": [f"About {title}"]}


async def test_results_are_read_from_exas_wire_format(fake_exa: FakeExa):
    results = await web_search("Why do we dream?")

    assert 3 <= len(results) <= 5
    first = results[0]
    assert first == WebResult(
        url="https://example.org/why-do-we-dream-1",
        title="Why do we dream? — source 1",
        snippet="Source 1 explains Why do we dream? with evidence (passage 1).",
        summary="Source 1 summarises what is known about Why do we dream?.",
        score=0.85,
        published_date=first.published_date,
        query="Why do we dream?",
        passage=first.passage,
        provider="exa",
    )
    assert first.published_date and first.published_date.startswith("2026-")
    [request] = fake_exa.searches
    assert request.headers["x-api-key"] == fake_exa.api_key
    assert request.body == {
        "query": "Why do we dream?",
        "contents": {"highlights": True, "summary": True, "text": {"maxCharacters": 3000}},
        "numResults": 5,
    }
    # The passage the model is shown: the highlight, then the page text, bounded.
    assert first.passage.startswith("Source 1 explains Why do we dream? with evidence")
    assert "Source 1 reports measurements on Why do we dream?" in first.passage
    assert len(first.passage) <= 1200 and first.passage.endswith("…")


async def test_page_text_asked_of_exa_is_bounded_by_the_setting(settings: Any, fake_exa: FakeExa):
    settings.DEEPTHINK_WEB_TEXT_CHARS = 200
    [first, *_] = await web_search("bounded text")
    assert fake_exa.searches[0].body["contents"]["text"] == {"maxCharacters": 200}
    highlight = "Source 1 explains bounded text with evidence (passage 1)."
    # Exa sent at most 200 characters of text: the passage is the highlight plus those.
    assert first.passage.startswith(highlight)
    assert len(first.passage) <= len(highlight) + len(" … ") + 200


async def test_the_same_page_under_different_urls_is_kept_once(fake_exa: FakeExa):
    fake_exa.enqueue(
        {
            "results": [
                page("https://Example.org/a/", "First"),
                page("https://www.example.org/a#section", "Same page, fragment"),
                page("http://example.org/a?utm_source=feed", "Same page, tracking"),
                page("https://example.org/a?page=2", "Another page"),
                page("https://example.org/b", "Second", score=None),
                {"id": "no-url", "url": "", "title": "Nothing to link"},
            ]
        }
    )
    results = await web_search("duplicates")
    assert [r.url for r in results] == [
        "https://Example.org/a/",
        "https://example.org/a?page=2",
        "https://example.org/b",
    ]
    assert results[0].snippet == "About First" and results[2].score is None


async def test_results_are_capped_by_max_items_per_source(settings: Any, fake_exa: FakeExa):
    settings.DEEPTHINK_WEB_MAX_ITEMS_PER_SOURCE = 2
    results = await web_search("capped", num_results=10)
    assert len(results) <= 2 and fake_exa.searches[0].body["numResults"] == 2


async def test_a_rate_limit_is_retried_once_and_then_succeeds(fake_exa: FakeExa):
    fake_exa.fail_next(429)
    results = await web_search("Why do we dream?")
    assert results and fake_exa.request_count == 2


async def test_a_server_error_twice_becomes_an_error_in_words(fake_exa: FakeExa):
    fake_exa.fail_next(503, count=2)
    error = await search_error()
    assert str(error) == "Exa is unavailable (HTTP 503)."
    assert error.kind == "unavailable" and error.status == 503
    assert fake_exa.request_count == 2, "one retry, no more"


async def test_a_rate_limit_twice_says_so(fake_exa: FakeExa):
    fake_exa.fail_next(429, count=2)
    assert str(await search_error()).startswith("Exa is rate limited")


async def test_a_wrong_key_names_the_key_and_is_not_retried(settings: Any, fake_exa: FakeExa):
    settings.EXA_API_KEY = "not-the-key"
    error = await search_error()
    assert str(error) == "Exa rejected the API key (check EXA_API_KEY)."
    assert error.kind == "auth" and fake_exa.request_count == 1


async def test_a_rejected_query_passes_on_exas_reason(fake_exa: FakeExa):
    fake_exa.fail_next(400, error="numResults must be between 1 and 100.")
    error = await search_error()
    assert str(error) == (
        "Exa rejected the query (HTTP 400): numResults must be between 1 and 100."
    )
    assert fake_exa.request_count == 1


async def test_a_silent_server_times_out_after_one_retry(settings: Any, fake_exa: FakeExa):
    settings.DEEPTHINK_RESEARCH_TIMEOUT_SECONDS = 0.2
    fake_exa.delay = 5
    error = await search_error()
    assert str(error) == "Exa did not answer within 0.2 seconds."
    assert error.kind == "timeout" and fake_exa.request_count == 2


async def test_an_unreachable_server_says_so(settings: Any):
    settings.EXA_API_KEY = "any"
    settings.EXA_BASE_URL = f"http://127.0.0.1:{_free_port()}"
    error = await search_error()
    assert str(error) == "Could not reach Exa (network, or EXA_BASE_URL)."


@pytest.mark.parametrize(
    "reply", [b"", b"NOT HTTP AT ALL\r\n\r\n"], ids=["hangs up", "a reply not in HTTP"]
)
async def test_a_server_that_answers_no_http_is_not_called_a_timeout(settings: Any, reply: bytes):
    """A connection the server closes before a reply, or answers with something that is not
    HTTP (a broken gateway), is a connection failure, retried once, in the words for one;
    the HTTP layer must not report it as a timeout or as an unexpected failure."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted = []

    def answer() -> None:
        for _ in range(2):  # the search and its one retry
            conn, _ = listener.accept()
            conn.recv(65536)
            conn.sendall(reply)
            conn.close()
            accepted.append(conn)

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    settings.EXA_API_KEY = "any"
    settings.EXA_BASE_URL = f"http://127.0.0.1:{listener.getsockname()[1]}"
    try:
        error = await search_error()
    finally:
        thread.join(timeout=5)
        listener.close()
    assert str(error) == "Could not reach Exa (network, or EXA_BASE_URL)."
    assert error.kind == "connection" and len(accepted) == 2


async def test_a_proxy_from_the_environment_is_used(
    fake_exa: FakeExa, monkeypatch: pytest.MonkeyPatch
):
    """HTTP_PROXY applies to web search as to the model client: through a proxy that is
    down, a search the server would answer directly does not reach it."""
    for name in ("NO_PROXY", "no_proxy", "http_proxy", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{_free_port()}")
    error = await search_error()
    assert str(error) == "Could not reach Exa (network, or EXA_BASE_URL)."
    assert fake_exa.request_count == 0


def _free_port() -> int:
    """A port nobody listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_an_identical_search_is_served_from_the_cache(fake_exa: FakeExa):
    first = await web_search("Why do we dream?")
    again = await web_search("  why do WE   dream? ")
    assert again == first
    assert fake_exa.request_count == 1
    entry = await SearchCache.objects.aget()
    assert entry.scope == "user:1" and entry.query == "why do we dream?"


async def test_results_are_held_until_the_caller_writes_them_to_the_cache_in_one_statement(
    fake_exa: FakeExa, monkeypatch: Any
):
    from research import cache

    writes: list[list[str]] = []
    written = asyncio.Event()
    real_upsert = cache.upsert

    async def slow_upsert(rows: list[SearchCache]) -> None:
        writes.append(sorted(row.query for row in rows))
        await asyncio.sleep(0.2)  # a slow database
        await real_upsert(rows)
        written.set()

    monkeypatch.setattr(cache, "upsert", slow_upsert)
    async with WebSearch.from_settings() as web:
        first = await web.search("tides", num_results=5, scope="user:1")
        assert first and await web.search("moon", num_results=5, scope="user:1")
        await asyncio.sleep(0.05)
        assert writes == []  # nothing written while the caller stores what it found
        again = await web.search(" Tides ", num_results=5, scope="user:1")
        assert again == first and fake_exa.request_count == 2  # the held results answered
        web.write_cache()
        await asyncio.sleep(0.05)
        assert writes == [["moon", "tides"]] and not written.is_set()  # one write for both
        third = await web.search("tides", num_results=5, scope="user:1")
        # It waited for the row and read it.
        assert written.is_set() and third == first and fake_exa.request_count == 2
        assert await web.search("storms", num_results=5, scope="user:1")
    # Closing writes what is still held and waits for it.
    assert writes == [["moon", "tides"], ["storms"]]
    assert {e.query async for e in SearchCache.objects.all()} == {"tides", "moon", "storms"}
    assert fake_exa.request_count == 3


async def test_searches_read_ahead_take_their_cached_results_from_one_statement(
    fake_exa: FakeExa, monkeypatch: Any
):
    cached = {query: await web_search(query) for query in ("tides", "moon")}
    reads = cache_reads(monkeypatch)
    async with WebSearch.from_settings() as web:
        queries = ["tides", " Moon ", "storms", "TIDES"]
        web.read_ahead(queries, num_results=5, scope="user:1")
        found = await asyncio.gather(
            *(web.search(query, num_results=5, scope="user:1") for query in queries[:3])
        )
        assert len(reads) == 1  # one read for the three searches
        assert found[:2] == [cached["tides"], cached["moon"]] and found[2]
        assert fake_exa.request_count == 3  # only "storms" was not cached
        # A read ahead is taken once: a later search reads the cache as it is then.
        assert await web.search("tides", num_results=5, scope="user:1") == cached["tides"]
        assert len(reads) == 2
        # Fewer than two searches to read: no read ahead, the search reads for itself.
        web.read_ahead(["moon"], num_results=5, scope="user:1")
        assert await web.search("moon", num_results=5, scope="user:1") == cached["moon"]
        assert len(reads) == 3 and fake_exa.request_count == 3


async def test_a_read_ahead_no_search_took_is_forgotten(fake_exa: FakeExa, monkeypatch: Any):
    """What a read ahead found is not kept for later: a search after it reads the cache as
    it is then (here, with a row another search wrote since)."""
    reads = cache_reads(monkeypatch)
    async with WebSearch.from_settings() as web:
        web.read_ahead(["tides", "moon"], num_results=5, scope="user:1")
        await web.forget_read_ahead()
        assert len(reads) == 1
        first = await web_search("tides")  # another session's search, cached
        assert await web.search("tides", num_results=5, scope="user:1") == first
    assert fake_exa.request_count == 1 and len(reads) == 3


async def test_a_search_whose_results_are_held_or_being_written_is_not_read_ahead(
    fake_exa: FakeExa, monkeypatch: Any
):
    reads = cache_reads(monkeypatch)
    async with WebSearch.from_settings() as web:
        await web.search("tides", num_results=5, scope="user:1")
        await web.search("moon", num_results=5, scope="user:1")
        assert len(reads) == 2
        web.read_ahead(["tides", "moon"], num_results=5, scope="user:1")  # both held
        web.write_cache()
        web.read_ahead(["tides", "moon"], num_results=5, scope="user:1")  # being written
        await web.forget_read_ahead()
        assert len(reads) == 2


async def test_results_that_could_not_be_cached_are_still_returned(
    fake_exa: FakeExa, monkeypatch: Any, caplog: Any
):
    from django.db import OperationalError

    from research import cache

    async def broken(rows: list[SearchCache]) -> None:
        raise OperationalError("the database went away")

    monkeypatch.setattr(cache, "upsert", broken)
    assert await web_search("tides")
    assert "Web results were not cached: the database went away" in caplog.text
    monkeypatch.undo()
    assert await web_search("tides") and fake_exa.request_count == 2  # asked again


async def test_the_cache_is_kept_per_scope_and_per_options(fake_exa: FakeExa):
    await web_search("tides", scope="user:1")
    await web_search("tides", scope="user:2")
    await web_search("tides", scope="user:1", num_results=3)
    await web_search("tides", scope="user:1")
    assert fake_exa.request_count == 3


async def test_an_expired_entry_is_refreshed_in_place(fake_exa: FakeExa):
    await web_search("tides")
    with time_machine.travel(timezone.now() + timedelta(hours=23)):
        await web_search("tides")
    assert fake_exa.request_count == 1
    later = timezone.now() + timedelta(hours=25)
    with time_machine.travel(later):
        await web_search("tides")
    assert fake_exa.request_count == 2
    entry = await SearchCache.objects.aget()
    assert entry.expires_at > later + timedelta(hours=23)


async def test_failures_are_not_cached(fake_exa: FakeExa):
    fake_exa.fail_next(503, count=2)
    await search_error("tides")
    assert await web_search("tides")
    assert fake_exa.request_count == 3


async def test_a_cache_period_of_zero_turns_the_cache_off(settings: Any, fake_exa: FakeExa):
    settings.DEEPTHINK_SEARCH_CACHE_SECONDS = 0
    await web_search("tides")
    await web_search("tides")
    assert fake_exa.request_count == 2 and not await SearchCache.objects.aexists()


async def test_an_empty_query_finds_nothing_without_asking(fake_exa: FakeExa):
    assert await web_search("   ") == []
    assert fake_exa.request_count == 0


async def test_searches_started_together_are_in_flight_together(fake_exa: FakeExa):
    fake_exa.delay = 0.3
    async with WebSearch.from_settings() as web:
        batches = await asyncio.gather(
            *(web.search(q, num_results=3, scope="user:1") for q in ("tides", "moon", "sea"))
        )
    assert all(batches)
    assert fake_exa.max_in_flight == 3


def test_without_a_key_web_search_is_off(settings: Any):
    assert not WebSearch.is_configured()
    with pytest.raises(ResearchError) as caught:
        WebSearch.from_settings()
    assert str(caught.value) == NOT_CONFIGURED and caught.value.kind == "not_configured"
    settings.EXA_API_KEY = "some-key"
    assert WebSearch.is_configured()


@pytest.mark.parametrize(
    ("url", "normal"),
    [
        ("https://Example.org/a/", "https://example.org/a"),
        ("http://www.example.org:80/a#top", "https://example.org/a"),
        ("https://example.org/a?b=2&a=1&utm_medium=x", "https://example.org/a?a=1&b=2"),
        ("https://example.org:8443/", "https://example.org:8443"),
    ],
)
def test_urls_are_normalised_to_the_page_they_name(url: str, normal: str):
    assert normalise_url(url) == normal


async def test_only_http_links_are_kept(fake_exa: FakeExa):
    fake_exa.enqueue(
        {
            "results": [
                page("javascript:alert(document.cookie)", "Script"),
                page("data:text/html,<script>alert(1)</script>", "Data"),
                page("JAVASCRIPT://example.org/%0aalert(1)", "Sneaky"),
                page("ftp://example.org/file", "FTP"),
                page("https://example.org/ok", "Fine"),
                page("http://example.org/also", "Also fine"),
            ]
        }
    )
    results = await web_search("links")
    assert [r.url for r in results] == ["https://example.org/ok", "http://example.org/also"]
