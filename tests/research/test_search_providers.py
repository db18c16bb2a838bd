"""Web search through SearxNG and Tavily (each against its wire-level fake), several
providers at once, a session's domain lists and recency window, and a cache kept per
provider and address (#72)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.db import connections

from fakes.exa_server import FakeExa
from fakes.searxng_server import FakeSearxng
from fakes.tavily_server import FakeTavily
from research import providers
from research.web import ResearchError, SearchOptions, WebResult, WebSearch

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
async def _close_connections() -> AsyncIterator[None]:
    yield
    await database_sync_to_async(connections.close_all)()


async def search(query: str, num_results: int = 5, **options: Any) -> list[WebResult]:
    async with WebSearch.from_settings() as web:
        return await web.search(
            query, num_results=num_results, scope="user:1", options=SearchOptions(**options)
        )


async def failure(query: str = "tides", **options: Any) -> ResearchError:
    with pytest.raises(ResearchError) as caught:
        await search(query, **options)
    return caught.value


def hosts(results: list[WebResult]) -> list[str]:
    return [r.url.split("/")[2] for r in results]


# --- SearxNG -------------------------------------------------------------------------------


async def test_searxng_results_are_read_from_its_json(fake_searxng: FakeSearxng):
    results = await search("Why do we dream?")

    [request] = fake_searxng.searches
    assert request.path == "/search"
    assert request.params["q"] == ["Why do we dream?"] and request.params["format"] == ["json"]
    assert "time_range" not in request.params
    first = results[0]
    assert first.url == "https://en.wikipedia.org/why-do-we-dream-1"
    assert first.title == "Why do we dream? — en.wikipedia.org (1)"
    assert first.snippet.startswith("Result 1 from en.wikipedia.org: what is known about")
    assert first.passage == first.snippet  # SearxNG's content is all there is of the page
    assert first.score == 2.0 and first.provider == "searxng"
    assert len(results) == 5, "a page of results, cut to the count asked"


async def test_searxng_gets_the_recency_window_and_its_results_are_held_to_the_domains(
    fake_searxng: FakeSearxng,
):
    results = await search(
        "coral bleaching",
        num_results=10,
        include_domains=("example.org", "example.com"),
        recency="week",
    )
    assert fake_searxng.searches[0].params["time_range"] == ["week"]
    # SearxNG takes no domain list: its other hosts are dropped here.
    assert set(hosts(results)) == {"www.example.org", "news.example.com"}

    excluded = await search("coral bleaching", num_results=10, exclude_domains=("wikipedia.org",))
    assert excluded and "en.wikipedia.org" not in hosts(excluded)


async def test_searxng_without_json_says_how_to_turn_it_on(fake_searxng: FakeSearxng):
    fake_searxng.json_enabled = False
    error = await failure()
    assert str(error) == (
        "SearxNG refused to answer in JSON: add json to search.formats in its settings.yml."
    )
    assert len(fake_searxng.searches) == 1, "not retried"


async def test_searxng_down_twice_is_retried_once_and_says_so(fake_searxng: FakeSearxng):
    fake_searxng.fail_next(502, count=2)
    error = await failure()
    assert str(error) == "SearxNG is unavailable (HTTP 502)." and error.retryable
    assert len(fake_searxng.searches) == 2


async def test_searxng_whose_engines_all_failed_says_which(fake_searxng: FakeSearxng):
    silent = {"results": [], "unresponsive_engines": [["google", "timeout"], ["bing", "CAPTCHA"]]}
    fake_searxng.enqueue(silent)
    fake_searxng.enqueue(silent)
    error = await failure()
    assert str(error) == "SearxNG's engines did not answer (google, bing)."


async def test_an_unreachable_searxng_names_its_setting(settings: Any):
    settings.SEARXNG_URL = "http://127.0.0.1:9"  # the discard port: nobody listens
    error = await failure()
    assert str(error) == "Could not reach SearxNG (network, or SEARXNG_URL)."


# --- Tavily --------------------------------------------------------------------------------


async def test_tavily_results_are_read_through_its_sdk(fake_tavily: FakeTavily, settings: Any):
    settings.DEEPTHINK_WEB_TEXT_CHARS = 120
    results = await search("Why do we dream?", num_results=3, recency="month")

    [request] = fake_tavily.searches
    assert request.headers["authorization"] == f"Bearer {fake_tavily.api_key}"
    assert request.body["query"] == "Why do we dream?"
    assert request.body["max_results"] == 3 and request.body["time_range"] == "month"
    assert request.body["include_raw_content"] == "text"
    assert len(results) == 3
    first = results[0]
    assert first.url == "https://www.nature.com/why-do-we-dream-1" and first.provider == "tavily"
    assert first.snippet.startswith("www.nature.com on Why do we dream?: the main findings")
    # Its snippet, then the page text asked for, bounded by the setting.
    assert first.passage.startswith(first.snippet + " … Page 1 on www.nature.com")
    assert len(first.passage) <= len(first.snippet) + 3 + 120
    assert first.score == pytest.approx(0.83)


async def test_tavily_gets_the_domain_lists(fake_tavily: FakeTavily):
    results = await search("tides", include_domains=("arxiv.org",), exclude_domains=("bbc.co.uk",))
    body = fake_tavily.searches[0].body
    assert body["include_domains"] == ["arxiv.org"] and body["exclude_domains"] == ["bbc.co.uk"]
    assert results and set(hosts(results)) == {"arxiv.org"}


async def test_tavily_with_a_wrong_key_names_the_key_and_is_not_retried(
    fake_tavily: FakeTavily, settings: Any
):
    settings.TAVILY_API_KEY = "tvly-wrong"
    error = await failure()
    assert str(error) == "Tavily rejected the API key (check TAVILY_API_KEY)."
    assert error.kind == "auth" and len(fake_tavily.searches) == 1


async def test_tavily_rate_limited_twice_is_retried_once(fake_tavily: FakeTavily):
    fake_tavily.fail_next(429, count=2)
    error = await failure()
    assert str(error) == "Tavily is rate limited; try again shortly."
    assert len(fake_tavily.searches) == 2
    fake_tavily.fail_next(503)
    assert await search("tides")  # the retry answers


# --- the choice of providers ---------------------------------------------------------------


async def test_several_providers_are_asked_side_by_side_and_interleaved(
    fake_exa: FakeExa, fake_searxng: FakeSearxng
):
    results = await search("tides", num_results=5, providers=("searxng", "exa"))
    assert [r.provider for r in results][:3] == ["searxng", "exa", "searxng"]
    assert len(fake_searxng.searches) == 1 and len(fake_exa.searches) == 1
    # A page both found (www.example.org/tides-2 and example.org/tides-2) is kept once,
    # from the provider that ranked it first.
    urls = [r.url for r in results]
    assert "https://www.example.org/tides-2" in urls
    assert "https://example.org/tides-2" not in urls and len(urls) == 5


async def test_one_provider_failing_leaves_the_others_results(
    fake_exa: FakeExa, fake_searxng: FakeSearxng, caplog: Any
):
    fake_searxng.fail_next(503, count=2)
    results = await search("tides", providers=("exa", "searxng"))
    assert results and {r.provider for r in results} == {"exa"}
    assert "Web search through SearxNG failed: SearxNG is unavailable (HTTP 503)." in caplog.text

    fake_exa.fail_next(503, count=2)
    fake_searxng.fail_next(503, count=2)
    error = await failure("moon", providers=("exa", "searxng"))
    assert str(error) == "Exa is unavailable (HTTP 503)."


async def test_the_default_is_deepthink_web_search_else_exa_when_its_key_is_set(
    fake_exa: FakeExa, fake_searxng: FakeSearxng, settings: Any
):
    assert providers.default_names() == ["exa"]
    await search("tides")
    assert len(fake_exa.searches) == 1 and not fake_searxng.searches

    settings.DEEPTHINK_WEB_SEARCH = ["searxng"]
    await search("moon")
    assert len(fake_exa.searches) == 1 and len(fake_searxng.searches) == 1

    settings.EXA_API_KEY = ""
    settings.DEEPTHINK_WEB_SEARCH = []
    assert providers.default_names() == ["searxng"]


async def test_a_provider_that_is_unknown_or_not_set_up_is_refused_in_words(
    fake_searxng: FakeSearxng,
):
    assert str(await failure(providers=("bing",))) == (
        "Unknown web search provider “bing”: choose from exa, searxng, tavily."
    )
    assert str(await failure(providers=("tavily",))) == (
        "Tavily is not set up on this server (TAVILY_API_KEY is not set)."
    )
    assert not fake_searxng.searches


# --- the cache -----------------------------------------------------------------------------


async def test_the_cache_is_kept_per_provider_address_and_filters(
    fake_exa: FakeExa, fake_searxng: FakeSearxng, settings: Any
):
    await search("tides", providers=("searxng",))
    await search("tides", providers=("searxng",))
    assert len(fake_searxng.searches) == 1, "the same search at the same instance: cached"
    await search("tides", providers=("exa",))
    assert len(fake_exa.searches) == 1, "another provider: asked"
    await search("tides", providers=("searxng",), recency="day")
    await search("tides", providers=("searxng",), exclude_domains=("example.org",))
    assert len(fake_searxng.searches) == 3, "other filters: asked"

    with FakeSearxng() as other:
        settings.SEARXNG_URL = other.base_url
        await search("tides", providers=("searxng",))
        assert len(other.searches) == 1, "another SearxNG instance: asked, not served the cache"
