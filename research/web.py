"""Web search: one or several providers (research/providers.py: Exa, SearxNG, Tavily) behind
one `search`, with one retry, readable errors and a cache.

The retry (one, with backoff, for rate limits, server errors, timeouts and lost
connections) is the same for every provider. Several providers are asked side by side and
their results interleaved, best first from each; results are deduplicated by normalised URL,
held to the session's domain lists and, per provider and scope, cached in the database
(research/cache.py).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import threading
from collections.abc import Sequence
from typing import Any, Self

import httpx
from django.conf import settings

from . import providers
from .cache import cache_key, cache_row, cached_many, cached_results, store_rows
from .models import SearchCache
from .providers import Provider
from .results import (
    ResearchError,
    SearchOptions,
    WebResult,
    dedupe,
    is_web_url,
    normalise_url,
)

__all__ = [
    "NOT_CONFIGURED",
    "ResearchError",
    "SearchOptions",
    "SharedWebClient",
    "WebResult",
    "WebSearch",
    "is_web_url",
    "normalise_url",
]

logger = logging.getLogger(__name__)

MAX_NUM_RESULTS = providers.MAX_NUM_RESULTS
RATE_LIMIT_BACKOFF = 2  # a rate limit waits this many retry bases before the second attempt

NOT_CONFIGURED = "Web search is off: set EXA_API_KEY, SEARXNG_URL or TAVILY_API_KEY to turn it on."

# A worker's shared clients carry every session's searches at once (a burst of sessions
# each searching 3 queries in parallel): the Anthropic SDK's pool size, not httpx's default
# of 100 connections, which would queue them where per-session clients did not.
SHARED_POOL_LIMITS = httpx.Limits(max_connections=1000, max_keepalive_connections=100)


def _settings() -> dict[str, Any]:
    return {
        "timeout": float(getattr(settings, "DEEPTHINK_RESEARCH_TIMEOUT_SECONDS", 20.0)),
        "text_chars": int(getattr(settings, "DEEPTHINK_WEB_TEXT_CHARS", providers.TEXT_CHARS)),
    }


class SharedWebClient:
    """One client per configured provider, and so one connection pool each, for all the
    sessions of a worker.

    `web_search()` hands each session its own `WebSearch` (timeout, result limits, cache
    time read from the settings as it starts; the cache scope and the session's options are
    passed per search) on the shared pools. A pool is built on its first request, so
    `web_search()` may be called from a database thread; the pool then belongs to the event
    loop of that first request. `aclose()` when the worker stops."""

    def __init__(self) -> None:
        self._clients: dict[tuple[Any, ...], Provider] = {}
        # web_search() runs in database hops, several threads at once on PostgreSQL.
        self._lock = threading.Lock()

    def web_search(self) -> WebSearch:
        """A session's WebSearch on the shared pools (ResearchError when no provider is
        configured). Its `aclose()` leaves the pools open."""
        return WebSearch(**WebSearch.settings_kwargs(), providers=self._shared(), owns=False)

    def _shared(self) -> list[Provider]:
        """The clients for the current settings, one per provider, key, address, timeout and
        text length."""
        common = _settings()
        made = []
        with self._lock:
            for name, config in providers.configured().items():
                key = (name, config["api_key"], config["address"], *common.values())
                client = self._clients.get(key)
                if client is None:
                    client = self._clients[key] = providers.make(
                        name, config, common=common, limits=SHARED_POOL_LIMITS
                    )
                made.append(client)
        return made

    def open(self) -> None:
        """Build the clients for the current settings and their pools now, on the running
        event loop (which they then belong to), instead of on the first search."""
        for client in self._shared():
            client.open()

    async def aclose(self) -> None:
        """Close the pools; a later `web_search()` builds new ones."""
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()


class WebSearch:
    """Web search with one retry, readable errors and a cache. Create one per event loop
    (its HTTP clients belong to the loop that first uses them) and close it with `aclose()`,
    or use it as `async with WebSearch.from_settings() as web:`; or, in a worker, one per
    session from a `SharedWebClient` (then `aclose()` leaves the shared pools open)."""

    def __init__(
        self,
        *,
        providers: Sequence[Provider],
        max_items_per_source: int = 10,
        cache_seconds: float = 24 * 3600,
        retry_base_seconds: float = 1.0,
        timeout: float = 20.0,
        owns: bool = True,
    ) -> None:
        if not providers:
            raise ResearchError(NOT_CONFIGURED, kind="not_configured")
        self.providers = {provider.name: provider for provider in providers}
        self.timeout = timeout
        self.max_items_per_source = max(1, max_items_per_source)
        self.cache_seconds = cache_seconds
        self.retry_base_seconds = retry_base_seconds
        self._owns = owns
        # Results found but not yet written to the cache, by key (`write_cache` writes
        # them), and those being written.
        self._held: dict[str, SearchCache] = {}
        self._caching: dict[str, asyncio.Task[None]] = {}
        # Cache reads started ahead of their searches, several keys a read (`read_ahead`).
        self._ahead: dict[str, asyncio.Future[dict[str, list[dict[str, Any]]]]] = {}

    @staticmethod
    def is_configured() -> bool:
        return bool(providers.configured())

    @staticmethod
    def settings_kwargs() -> dict[str, Any]:
        """The constructor's arguments, but the providers, as the settings give them."""
        return {
            "timeout": _settings()["timeout"],
            "max_items_per_source": int(
                getattr(settings, "DEEPTHINK_WEB_MAX_ITEMS_PER_SOURCE", 10)
            ),
            "cache_seconds": float(getattr(settings, "DEEPTHINK_SEARCH_CACHE_SECONDS", 24 * 3600)),
            "retry_base_seconds": float(getattr(settings, "DEEPTHINK_RETRY_BASE_SECONDS", 1.0)),
        }

    @classmethod
    def from_settings(cls) -> WebSearch:
        """Clients of its own for every configured provider."""
        common = _settings()
        made = [
            providers.make(name, config, common=common, limits=None)
            for name, config in providers.configured().items()
        ]
        return cls(**cls.settings_kwargs(), providers=made)

    def provider(self, name: str) -> Provider:
        """The client of one configured provider (KeyError if it is not configured)."""
        return self.providers[name]

    def chosen(self, options: SearchOptions) -> list[Provider]:
        """The providers a search with `options` asks: the session's choice, else the
        deployment's default; a provider not configured here is refused."""
        names = list(options.providers) or providers.default_names()
        for name in names:
            if name not in self.providers:
                reason = providers.not_configured(name) or f"{name} is not available."
                raise ResearchError(reason, kind="not_configured")
        if not names:
            raise ResearchError(NOT_CONFIGURED, kind="not_configured")
        return [self.providers[name] for name in dict.fromkeys(names)]

    def longest_call(self) -> float:
        """The longest `search` can take before it answers or raises, in seconds: two
        attempts, each bounded by `timeout`, and the wait between them (longest after a
        rate limit); several providers are asked side by side. A caller's own deadline above
        it never cuts a healthy search short."""
        return 2 * self.timeout + RATE_LIMIT_BACKOFF * self.retry_base_seconds

    async def aclose(self) -> None:
        """Write the results still held, wait for the cache writes under way, then close the
        clients (if this search owns them)."""
        await self.forget_read_ahead()
        self.write_cache()
        if self._caching:
            await asyncio.wait(list(self._caching.values()))
        if self._owns:
            for provider in self.providers.values():
                await provider.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def search(
        self,
        query: str,
        *,
        num_results: int,
        scope: str,
        options: SearchOptions | None = None,
    ) -> list[WebResult]:
        """Up to `num_results` (at most `max_items_per_source`) distinct pages for `query`,
        best first, from the providers `options` choose (else the deployment's default),
        held to its domain lists and recency window. `scope` ("user:5", "team:3") decides
        who shares cached results. Raises ResearchError when the search fails for good (with
        several providers: when every one of them failed)."""
        options = options or SearchOptions()
        text, count = self._text_count(query, num_results)
        if not text:
            return []
        chosen = self.chosen(options)
        asked = await asyncio.gather(
            *(self._search_one(p, text, count, scope, options) for p in chosen),
            return_exceptions=True,
        )
        lists: list[list[WebResult]] = []
        failures: list[BaseException] = []
        for provider, outcome in zip(chosen, asked, strict=True):
            if isinstance(outcome, BaseException):
                if not isinstance(outcome, Exception):
                    raise outcome  # a cancel
                failures.append(outcome)
                if len(chosen) > 1:
                    logger.warning("Web search through %s failed: %s", provider.label, outcome)
            else:
                lists.append(outcome)
        if failures and not lists:
            raise failures[0]
        # Best first from each provider in turn, so each one's best pages are kept.
        merged = (r for row in itertools.zip_longest(*lists) for r in row if r is not None)
        return dedupe(r for r in merged if is_web_url(r.url) and options.admits(r.url))[:count]

    def _text_count(self, query: str, num_results: int) -> tuple[str, int]:
        text = " ".join(query.split())
        return text, max(1, min(num_results, self.max_items_per_source, MAX_NUM_RESULTS))

    def _key(
        self, provider: Provider, text: str, count: int, scope: str, options: SearchOptions
    ) -> tuple[dict[str, Any], str]:
        """A provider's search's options and cache key (the provider and its address are
        part of it: another instance, or a stand-in, answers differently)."""
        asked = provider.request_options(count, options)
        key = cache_key(
            kind="web",
            scope=scope,
            query=text,
            options=asked,
            provider=provider.name,
            address=provider.address,
        )
        return asked, key

    async def _search_one(
        self, provider: Provider, text: str, count: int, scope: str, options: SearchOptions
    ) -> list[WebResult]:
        """One provider's results, from the cache when it has them."""
        asked, key = self._key(provider, text, count, scope, options)
        if self.cache_seconds > 0:
            held = self._held.get(key)
            if held is not None:  # the same search just finished here, its row not yet written
                return [WebResult.from_dict(item) for item in held.results]
            storing = self._caching.get(key)
            ahead = self._ahead.pop(key, None)
            if storing is not None:  # its row is being written: read it
                await asyncio.wait([storing])
                cached = await cached_results(key)
            elif ahead is not None:  # read with the other searches read ahead
                cached = (await asyncio.shield(ahead)).get(key)
            else:
                cached = await cached_results(key)
            if cached is not None:
                return [WebResult.from_dict(item) for item in cached]

        found = await self._search_with_retry(provider, text, count, options)
        results = dedupe(found)[:count]
        if self.cache_seconds > 0:
            # Held until the caller has stored and used the results (`write_cache`).
            self._held[key] = cache_row(
                key=key,
                kind="web",
                scope=scope,
                query=text,
                options={"provider": provider.name, "address": provider.address, **asked},
                results=[result.to_dict() for result in results],
                ttl_seconds=self.cache_seconds,
            )
        return results

    def read_ahead(
        self,
        queries: Sequence[str],
        *,
        num_results: int,
        scope: str,
        options: SearchOptions | None = None,
    ) -> None:
        """Start reading the cached results of these searches in one statement, for the
        `search` of each to take (a plan's web queries, which would otherwise read the cache
        a hop each, side by side). Only searches that would read it: not one whose results
        are held here or being written; nothing for fewer than two. `forget_read_ahead` drops
        what no search took."""
        options = options or SearchOptions()
        if self.cache_seconds <= 0:
            return
        try:
            chosen = self.chosen(options)
        except ResearchError:
            return  # each search says so
        keys = []
        for query in queries:
            text, count = self._text_count(query, num_results)
            for provider in chosen:
                _, key = self._key(provider, text, count, scope, options)
                if text and key not in self._held and key not in self._caching and key not in keys:
                    keys.append(key)
        if len(keys) < 2:
            return
        reading = asyncio.ensure_future(cached_many(keys))
        for key in keys:
            self._ahead[key] = reading

    async def forget_read_ahead(self) -> None:
        """Drop the reads ahead that no search took (a later search reads the cache as it is
        then), waiting for those still running."""
        reads, self._ahead = set(self._ahead.values()), {}
        # Read errors are the searches' to report; one that no search took is dropped.
        await asyncio.gather(*reads, return_exceptions=True)

    def write_cache(self) -> None:
        """Start writing the results found since the last call to the cache, in one
        statement, beside the caller's next work (a search's caller calls this once it has
        stored what it found, so the write does not compete with that store). A write that
        fails is logged; an identical search then asks again."""
        if not self._held:
            return
        keys, rows = list(self._held), list(self._held.values())
        self._held = {}
        storing = asyncio.create_task(store_rows(rows))
        for key in keys:
            self._caching[key] = storing
        storing.add_done_callback(functools.partial(self._cached, keys))

    def _cached(self, keys: list[str], storing: asyncio.Task[None]) -> None:
        for key in keys:
            if self._caching.get(key) is storing:
                del self._caching[key]
        if not storing.cancelled() and (error := storing.exception()) is not None:
            # The results were used all the same; an identical search asks again.
            logger.warning("Web results were not cached: %s", error)

    async def _search_with_retry(
        self, provider: Provider, text: str, count: int, options: SearchOptions
    ) -> list[WebResult]:
        for attempt in range(2):
            try:
                # The provider's timeout bounds each wait for data; this bounds the whole call.
                async with asyncio.timeout(self.timeout):
                    return await provider.search(text, count, options)
            except Exception as error:
                failure = provider.describe(error, timeout=self.timeout)
                if not failure.retryable or attempt > 0:
                    raise failure from error
                # Rate limits need more room than a server hiccup.
                delay = self.retry_base_seconds * (
                    RATE_LIMIT_BACKOFF if failure.kind == "rate_limited" else 1
                )
                logger.warning("Web search failed (%s); retrying in %.2fs", failure, delay)
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover
