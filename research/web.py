"""Web search through Exa: the only module that imports `exa_py`.

exa-py never retries and reports every HTTP error as a bare
``ValueError("Request failed with status code N: <body>")``, so the retry (one, with
backoff, for rate limits, server errors, timeouts and lost connections) and the mapping of
failures to sentences a person can act on live here. Results are deduplicated by
normalised URL and, per scope, cached in the database (research/cache.py).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, Self
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import httpx
from django.conf import settings
from exa_py import AsyncExa
from exa_py.api import ContentsOptions

from .cache import cache_key, cache_row, cached_many, cached_results, store_rows
from .models import SearchCache

logger = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.exa.ai"
# Highlights are the passages Exa picks for the query (the SDK's advice for LLM context);
# the summary is a short abstract of the page; the text (bounded) is the page itself, so a
# citation can be checked against what the page says, not only Exa's picks.
CONTENTS: ContentsOptions = {"highlights": True, "summary": True}
TEXT_CHARS = 3000  # page text asked of Exa per result (DEEPTHINK_WEB_TEXT_CHARS)
PASSAGE_CHARS = 1200  # the passage of a page shown to the model and kept with the source
MAX_NUM_RESULTS = 100  # Exa's own ceiling
SNIPPET_CHARS = 600
RATE_LIMIT_BACKOFF = 2  # a rate limit waits this many retry bases before the second attempt
STATUS_IN_MESSAGE = re.compile(r"status code (\d{3})")
# Query parameters that only track where a click came from.
TRACKING_PARAMS = re.compile(r"^(utm_\w+|fbclid|gclid|mc_cid|mc_eid|ref_src)$", re.IGNORECASE)

NOT_CONFIGURED = "Web search is off: set EXA_API_KEY to turn it on."


class ResearchError(Exception):
    """A research call that failed for good; `str(error)` is fit to show a person."""

    def __init__(
        self,
        message: str,
        *,
        kind: str = "error",
        status: int | None = None,
        retryable: bool = False,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status
        self.retryable = retryable


@dataclass(frozen=True)
class WebResult:
    url: str
    title: str
    snippet: str  # from Exa's highlights (the summary or text when there are none)
    summary: str
    score: float | None  # Exa's relevance, higher is better; None when Exa gives none
    published_date: str | None  # as Exa gives it, ISO 8601
    query: str  # the search that found it
    # What the model is shown of the page: highlights, then the page text, bounded. Stored
    # with the source so a citation is checked against exactly this.
    passage: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WebResult:
        known = {f.name for f in fields(cls)}
        return cls(**{name: value for name, value in data.items() if name in known})


def normalise_url(url: str) -> str:
    """A URL reduced to what identifies the page: lower-case scheme and host, no "www.",
    default port, fragment, trailing slash or tracking parameters; sorted query."""
    parts = urlsplit(url.strip())
    scheme = (parts.scheme or "https").lower()
    host = (parts.hostname or "").lower().removeprefix("www.")
    port = parts.port if parts.port not in (None, 80, 443) else None
    netloc = f"{host}:{port}" if port else host
    path = parts.path.rstrip("/") or ""
    query = urlencode(
        sorted(
            (name, value)
            for name, value in parse_qsl(parts.query, keep_blank_values=True)
            if not TRACKING_PARAMS.match(name)
        )
    )
    # http and https of one page are the same page.
    scheme = "https" if scheme in ("http", "https") else scheme
    return urlunsplit((scheme, netloc, path, query, ""))


def dedupe(results: list[WebResult]) -> list[WebResult]:
    """Results with the same normalised URL collapse into the first (the better-ranked)."""
    seen: set[str] = set()
    unique: list[WebResult] = []
    for result in results:
        key = normalise_url(result.url)
        if key not in seen:
            seen.add(key)
            unique.append(result)
    return unique


def describe_error(error: BaseException, *, timeout: float) -> ResearchError:
    """Turn an exa-py or transport exception into words a person can act on."""
    if isinstance(error, ResearchError):
        return error
    if isinstance(error, TimeoutError | httpx.TimeoutException):
        # exa-py's ExaTimeoutError is also an httpx.TimeoutException.
        return ResearchError(
            f"Web search did not answer within {timeout:g} seconds.", kind="timeout", retryable=True
        )
    if isinstance(error, httpx.TransportError):
        return ResearchError(
            "Could not reach web search (network, or EXA_BASE_URL).",
            kind="connection",
            retryable=True,
        )
    if isinstance(error, ValueError) and (match := STATUS_IN_MESSAGE.search(str(error))):
        return _describe_status(int(match.group(1)), str(error))
    if isinstance(error, ValueError | KeyError):  # a body that is not JSON, or no "results"
        logger.warning("Unreadable reply from Exa: %r", error)
        return ResearchError("Web search sent a reply that could not be read.", kind="bad_reply")
    logger.exception("Unexpected error from web search", exc_info=error)
    return ResearchError("Web search failed unexpectedly.", kind="unexpected")


def _describe_status(status: int, message: str) -> ResearchError:
    if status == 401:
        return ResearchError(
            "Web search rejected the API key (check EXA_API_KEY).", kind="auth", status=status
        )
    if status == 402:
        return ResearchError(
            "Web search has no credits left on this API key.", kind="billing", status=status
        )
    if status == 403:
        return ResearchError(
            "Web search refused the request (HTTP 403): the API key may not allow it.",
            kind="forbidden",
            status=status,
        )
    if status == 429:
        return ResearchError(
            "Web search is rate limited; try again shortly.",
            kind="rate_limited",
            status=status,
            retryable=True,
        )
    if status >= 500:
        return ResearchError(
            f"Web search is unavailable (HTTP {status}).",
            kind="unavailable",
            status=status,
            retryable=True,
        )
    detail = _error_detail(message)
    return ResearchError(
        f"Web search rejected the query (HTTP {status}){': ' + detail if detail else ''}.",
        kind="rejected",
        status=status,
    )


def _error_detail(message: str) -> str:
    """Exa's own explanation from an error body ({"error": "...", "tag": "..."}), if any."""
    _, _, body = message.partition(": ")
    try:
        detail = json.loads(body).get("error", "")
    except (ValueError, AttributeError):
        return ""
    detail = " ".join(str(detail).split()).rstrip(".")
    return detail[:200]


def _snippet(result: Any) -> str:
    highlights = [" ".join(h.split()) for h in (result.highlights or []) if h and h.strip()]
    text = " … ".join(highlights) or result.summary or result.text or ""
    text = " ".join(text.split())
    if len(text) > SNIPPET_CHARS:
        text = text[: SNIPPET_CHARS - 1].rstrip() + "…"
    return text


def is_web_url(url: str) -> bool:
    """Only http(s) links are kept: a `javascript:` or `data:` URL from a search result would
    otherwise reach storage, the API, exports and every page that links a source."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return parts.scheme.lower() in ("http", "https") and bool(parts.hostname)


def _passage(result: Any) -> str:
    highlights = [" ".join(h.split()) for h in (result.highlights or []) if h and h.strip()]
    text = " ".join((result.text or "").split())
    parts = [*highlights]
    if text and not any(text.startswith(h[:60]) for h in highlights):
        parts.append(text)
    passage = " … ".join(parts) or " ".join((result.summary or "").split())
    if len(passage) > PASSAGE_CHARS:
        passage = passage[: PASSAGE_CHARS - 1].rstrip() + "…"
    return passage


def _to_result(result: Any, *, query: str) -> WebResult | None:
    url = (result.url or "").strip()
    if not is_web_url(url):
        return None
    score = result.score
    return WebResult(
        url=url,
        title=" ".join((result.title or "").split()) or url,
        snippet=_snippet(result),
        summary=" ".join((result.summary or "").split()),
        score=float(score) if isinstance(score, int | float) else None,
        published_date=result.published_date or None,
        query=query,
        passage=_passage(result),
    )


# A worker's shared Exa client carries every session's searches at once (a burst of sessions
# each searching 3 queries in parallel): the Anthropic SDK's pool size, not httpx's default
# of 100 connections, which would queue them where per-session clients did not.
SHARED_POOL_LIMITS = httpx.Limits(max_connections=1000, max_keepalive_connections=100)


class _Exa(AsyncExa):
    """exa-py's client on an httpx pool of given limits, built (like exa-py's own, on first
    request) on the event loop that uses it, and refusing any other loop. exa-py takes no
    HTTP client or limits; its requests go through its public `client`, so that is where
    this one gives its own (with exa-py's base URL, headers and timeout)."""

    def __init__(
        self, *, api_key: str, api_base: str, timeout: float, limits: httpx.Limits | None = None
    ) -> None:
        super().__init__(api_key=api_key, api_base=api_base, timeout=timeout)
        self.limits = limits  # None: httpx's default
        self.http: httpx.AsyncClient | None = None
        self.loop: asyncio.AbstractEventLoop | None = None

    @property
    def client(self) -> httpx.AsyncClient:
        running = asyncio.get_running_loop()
        if self.http is None:
            sized: dict[str, Any] = {} if self.limits is None else {"limits": self.limits}
            self.http = httpx.AsyncClient(
                base_url=self.base_url, headers=self.headers, timeout=self.timeout, **sized
            )
            self.loop = running
        elif self.loop is not running:
            raise RuntimeError("A web-search client belongs to the event loop that built it")
        return self.http

    def open(self) -> httpx.AsyncClient:
        """The HTTP client, built now if it was not (on the running event loop)."""
        return self.client

    async def aclose(self) -> None:
        """Close the pool; a later request builds a new one."""
        http, self.http, self.loop = self.http, None, None
        if http is not None:
            await http.aclose()


class SharedWebClient:
    """One Exa client, and so one connection pool, for all the sessions of a worker.

    `web_search()` hands each session its own `WebSearch` (timeout, result limits, cache
    time read from the settings as it starts; the cache scope is passed per search) on the
    shared pool. exa-py builds its HTTP client on the first request, so `web_search()` may
    be called from a database thread; the client then belongs to the event loop of that
    first request. `aclose()` when the worker stops."""

    def __init__(self) -> None:
        self._clients: dict[tuple[str, str, float], _Exa] = {}
        # web_search() runs in database hops, several threads at once on PostgreSQL.
        self._lock = threading.Lock()

    def web_search(self) -> WebSearch:
        """A session's WebSearch on the shared pool (ResearchError when not configured).
        Its `aclose()` leaves the pool open."""
        settings_ = WebSearch.settings_kwargs()
        if not settings_["api_key"]:
            raise ResearchError(NOT_CONFIGURED, kind="not_configured")
        return WebSearch(**settings_, exa=self._shared(settings_))

    def _shared(self, settings_: dict[str, Any]) -> _Exa:
        """The client for these settings (`WebSearch.settings_kwargs`), one per key, base
        URL and timeout."""
        key = (settings_["api_key"], settings_["base_url"], settings_["timeout"])
        with self._lock:
            exa = self._clients.get(key)
            if exa is None:
                exa = self._clients[key] = _Exa(
                    api_key=key[0],
                    api_base=_api_base(key[1]),
                    timeout=key[2],
                    limits=SHARED_POOL_LIMITS,
                )
        return exa

    def open(self) -> None:
        """Build the client for the current settings and its HTTP pool now, on the running
        event loop (which it then belongs to), instead of on the first search; nothing
        without an Exa key."""
        settings_ = WebSearch.settings_kwargs()
        if settings_["api_key"]:
            self._shared(settings_).open()

    async def aclose(self) -> None:
        """Close the pool(s); a later `web_search()` builds a new one."""
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for exa in clients:
            await exa.aclose()


def _api_base(base_url: str) -> str:
    # exa-py joins base URL and path by plain concatenation: no trailing slash.
    return (base_url or DEFAULT_BASE_URL).rstrip("/")


class WebSearch:
    """Exa search with one retry, readable errors and a cache. Create one per event loop
    (its HTTP client belongs to the loop that first uses it) and close it with `aclose()`,
    or use it as `async with WebSearch.from_settings() as web:`; or, in a worker, one per
    session from a `SharedWebClient` (then `aclose()` leaves the shared pool open)."""

    def __init__(
        self,
        *,
        api_key: str,
        base_url: str = "",
        timeout: float = 20.0,
        max_items_per_source: int = 10,
        cache_seconds: float = 24 * 3600,
        retry_base_seconds: float = 1.0,
        text_chars: int = TEXT_CHARS,
        exa: AsyncExa | None = None,
    ) -> None:
        if not api_key:
            raise ResearchError(NOT_CONFIGURED, kind="not_configured")
        self.timeout = timeout
        self.max_items_per_source = max(1, max_items_per_source)
        self.cache_seconds = cache_seconds
        self.retry_base_seconds = retry_base_seconds
        self.contents: ContentsOptions = {**CONTENTS}
        if text_chars > 0:
            self.contents["text"] = {"max_characters": text_chars}
        self._owns_exa = exa is None
        # Results found but not yet written to the cache, by key (`write_cache` writes
        # them), and those being written.
        self._held: dict[str, SearchCache] = {}
        self._caching: dict[str, asyncio.Task[None]] = {}
        # Cache reads started ahead of their searches, several keys a read (`read_ahead`).
        self._ahead: dict[str, asyncio.Future[dict[str, list[dict[str, Any]]]]] = {}
        self._exa = (
            exa
            if exa is not None
            else _Exa(api_key=api_key, api_base=_api_base(base_url), timeout=timeout)
        )

    @staticmethod
    def is_configured() -> bool:
        return bool(getattr(settings, "EXA_API_KEY", ""))

    @staticmethod
    def settings_kwargs() -> dict[str, Any]:
        """The constructor's arguments as the settings give them."""
        return {
            "api_key": getattr(settings, "EXA_API_KEY", ""),
            "base_url": getattr(settings, "EXA_BASE_URL", ""),
            "timeout": float(getattr(settings, "DEEPTHINK_RESEARCH_TIMEOUT_SECONDS", 20.0)),
            "max_items_per_source": int(
                getattr(settings, "DEEPTHINK_WEB_MAX_ITEMS_PER_SOURCE", 10)
            ),
            "cache_seconds": float(getattr(settings, "DEEPTHINK_SEARCH_CACHE_SECONDS", 24 * 3600)),
            "retry_base_seconds": float(getattr(settings, "DEEPTHINK_RETRY_BASE_SECONDS", 1.0)),
            "text_chars": int(getattr(settings, "DEEPTHINK_WEB_TEXT_CHARS", TEXT_CHARS)),
        }

    @classmethod
    def from_settings(cls) -> WebSearch:
        return cls(**cls.settings_kwargs())

    def longest_call(self) -> float:
        """The longest `search` can take before it answers or raises, in seconds: two
        attempts, each bounded by `timeout`, and the wait between them (longest after a
        rate limit). A caller's own deadline above it never cuts a healthy search short."""
        return 2 * self.timeout + RATE_LIMIT_BACKOFF * self.retry_base_seconds

    async def aclose(self) -> None:
        """Write the results still held, wait for the cache writes under way, then close the
        client (if this search owns it)."""
        await self.forget_read_ahead()
        self.write_cache()
        if self._caching:
            await asyncio.wait(list(self._caching.values()))
        if self._owns_exa:
            await self._exa.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def search(self, query: str, *, num_results: int, scope: str) -> list[WebResult]:
        """Up to `num_results` (at most `max_items_per_source`) distinct pages for `query`,
        best first. `scope` ("user:5", "team:3") decides who shares cached results.
        Raises ResearchError when the search fails for good."""
        text, count, options, key = self._search_key(query, num_results, scope)
        if not text:
            return []
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
                # Cached before http(s) was required, perhaps: filter again.
                return [
                    result
                    for result in (WebResult.from_dict(item) for item in cached)
                    if is_web_url(result.url)
                ]

        response = await self._search_with_retry(text, count)
        parsed = [_to_result(result, query=text) for result in response.results]
        results = dedupe([result for result in parsed if result is not None])[:count]

        if self.cache_seconds > 0:
            # Held until the caller has stored and used the results (`write_cache`).
            self._held[key] = cache_row(
                key=key,
                kind="web",
                scope=scope,
                query=text,
                options=options,
                results=[result.to_dict() for result in results],
                ttl_seconds=self.cache_seconds,
            )
        return results

    def _search_key(
        self, query: str, num_results: int, scope: str
    ) -> tuple[str, int, dict[str, Any], str]:
        """A search's query as sent, its result count, its options and its cache key."""
        text = " ".join(query.split())
        count = max(1, min(num_results, self.max_items_per_source, MAX_NUM_RESULTS))
        options = {"num_results": count, "contents": self.contents}
        return text, count, options, cache_key(kind="web", scope=scope, query=text, options=options)

    def read_ahead(self, queries: Sequence[str], *, num_results: int, scope: str) -> None:
        """Start reading the cached results of these searches in one statement, for the
        `search` of each to take (a plan's web queries, which would otherwise read the cache
        a hop each, side by side). Only searches that would read it: not one whose results
        are held here or being written; nothing for fewer than two. `forget_read_ahead` drops
        what no search took."""
        if self.cache_seconds <= 0:
            return
        keys = []
        for query in queries:
            text, _, _, key = self._search_key(query, num_results, scope)
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

    async def _search_with_retry(self, text: str, count: int) -> Any:
        for attempt in range(2):
            try:
                # exa-py's timeout bounds each wait for data; this bounds the whole call.
                async with asyncio.timeout(self.timeout):
                    return await self._exa.search(
                        text, contents=self.contents, num_results=count, timeout=self.timeout
                    )
            except Exception as error:
                failure = describe_error(error, timeout=self.timeout)
                if not failure.retryable or attempt > 0:
                    raise failure from error
                # Rate limits need more room than a server hiccup.
                delay = self.retry_base_seconds * (
                    RATE_LIMIT_BACKOFF if failure.kind == "rate_limited" else 1
                )
                logger.warning("Web search failed (%s); retrying in %.2fs", failure, delay)
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover
